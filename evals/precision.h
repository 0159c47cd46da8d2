#pragma once
// The precision a config promises: `precision: {half_width: 10, over: task | suite}` in an eval
// config refuses, before anything runs or is written, a config whose samples cannot give 95%
// intervals that narrow. The bound is the worst case over every score in 0-100 (the leaderboard's
// Wilson and bootstrap intervals alike): a score's standard deviation is at most 50 points (half
// the samples at 0, half at 100), so the normal-approximation half-width with n samples is at most
//   z * 50 / sqrt(n),  z = 1.959964 (the 97.5% normal quantile).
// It does not depend on the scores, so it can be checked before the run; Wilson's interval at
// p = 0.5, z / (2 sqrt(n + z^2)), is narrower, so the bound holds for 0/1 metrics too.
//
// Scopes: `task` — every (task, policy, budget) cell of the leaderboard holds the task's samples;
// `suite` — the pooled cell over every task of the config (the leaderboard's "all tasks" row).
#include <cstdint>
#include <string>
#include <vector>

#include "evals/tasks/sample.h"

namespace kvevict::evals {

enum class PrecisionScope { Task, Suite };

struct PrecisionTarget {
  double half_width = 0;  // points (0-100 scale); 0 = no target
  PrecisionScope over = PrecisionScope::Task;
  std::string where;      // "file:line:col" of `half_width` (or "--set precision.half_width"), for the refusal
};

// Largest 95% half-width (points) that n samples of a 0-100 score can have; n >= 1.
double worst_case_half_width(int64_t samples);
// Fewest samples whose worst-case half-width is at most `half_width` points (> 0).
int64_t samples_for_half_width(double half_width);

// Throws UsageError at target.where, naming the task (or the suite), its samples and the samples it
// needs, when `samples` cannot reach the target. No-op when target.half_width is 0.
void check_precision(const PrecisionTarget& target, const std::vector<Sample>& samples);

}  // namespace kvevict::evals
