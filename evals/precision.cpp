#include "evals/precision.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "core/util/error.h"

namespace kvevict::evals {
namespace {

constexpr double kZ95 = 1.959963984540054;  // the 97.5% quantile of the standard normal
constexpr double kMaxScoreSd = 50.0;        // points: half the samples at 0, half at 100

std::string points(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

}  // namespace

double worst_case_half_width(int64_t samples) {
  return kZ95 * kMaxScoreSd / std::sqrt(static_cast<double>(samples < 1 ? 1 : samples));
}

int64_t samples_for_half_width(double half_width) {
  const double ratio = kZ95 * kMaxScoreSd / half_width;
  auto needed = static_cast<int64_t>(std::ceil(ratio * ratio - 1e-9));
  return needed < 1 ? 1 : needed;
}

void check_precision(const PrecisionTarget& target, const std::vector<Sample>& samples) {
  if (target.half_width <= 0) return;
  std::map<std::string, int64_t> per_task;
  for (const auto& sample : samples) ++per_task[sample.task];
  const int64_t needed = samples_for_half_width(target.half_width);
  auto refuse = [&](const std::string& what, int64_t have) {
    throw UsageError(target.where + ": error: precision: " + what + " has " + std::to_string(have) +
                     " samples per cell, whose 95% interval can be as wide as +/-" +
                     points(worst_case_half_width(have)) + " points; +/-" + points(target.half_width) +
                     " needs at least " + std::to_string(needed) + " (raise `samples`, or add lengths or depths)");
  };
  if (target.over == PrecisionScope::Suite) {
    const auto total = static_cast<int64_t>(samples.size());
    if (total < needed) refuse("the suite (every task pooled)", total);
    return;
  }
  for (const auto& [task, count] : per_task) {
    if (count < needed) refuse("task '" + task + "'", count);
  }
}

}  // namespace kvevict::evals
