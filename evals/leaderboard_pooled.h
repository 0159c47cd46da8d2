#pragma once
// The leaderboard's pooled group: per model with results on two or more tasks, one more group,
// task "all tasks", whose cell per (policy, budget) holds every task's samples at once. Its n is the
// sum of the tasks' n, so its interval is the suite-level one a config's `precision: {over: suite}`
// asks for (evals/precision.h); its aggregate figures are sample-weighted means of the tasks'
// (RULER's task average when every task has the same samples). Sample keys are made distinct across
// tasks ("task\x1fkey"), so a paired difference to full pairs each sample with its own full cell.
#include <string>
#include <vector>

#include "evals/results_store.h"

namespace kvevict::evals {

inline constexpr const char* kPooledTask = "all tasks";

// One pooled AggregateRow per (model, policy, budget) for the models with >= 2 tasks in `rows`
// (in the order of first appearance); run_id is 0: the rows may come from several runs.
std::vector<AggregateRow> pooled_rows(const std::vector<AggregateRow>& rows);

// The task aggregates a pooled row is made of (same model, policy and budget, any task).
std::vector<const AggregateRow*> pooled_members(const std::vector<AggregateRow>& rows, const AggregateRow& pooled);

}  // namespace kvevict::evals
