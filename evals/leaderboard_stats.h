#pragma once
// The leaderboard's figures, before any formatting: per (model, task) group one row per policy and
// per budget one cell with the store's aggregate, the n and 95% interval of its per-sample scores
// (evals/stats_interval.h) and the paired difference to the full cache on the same samples
// (evals/stats_paired.h); per row the iso-quality budget (evals/stats_iso_quality.h).
//
// The full-cache reference of a policy is its own `full` cell when it has one, else the `full` cell
// of the alphabetically first policy of the group that has one (the full cache does not depend on
// the policy). Means over budgets exclude `full` unless `full` is the only budget. A model with two
// or more tasks gets one more group, task "all tasks", pooling every task's samples per cell
// (evals/leaderboard_pooled.h).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "evals/leaderboard_metric.h"
#include "evals/results_store.h"
#include "evals/stats_interval.h"
#include "evals/stats_iso_quality.h"
#include "evals/stats_paired.h"

namespace kvevict::evals {

struct LeaderboardCell {
  AggregateRow aggregate;
  ScoreSummary score;        // n == 0 when per-sample scores were not available
  PairedDifference vs_full;  // score - full; n == 0 without a full reference
};

struct LeaderboardRow {
  std::string policy;
  std::map<std::string, LeaderboardCell> cells;  // by budget text
  IsoQuality iso;
};

struct LeaderboardGroup {
  std::string model, task;
  std::vector<std::string> budgets;  // display order
  std::vector<LeaderboardRow> rows;  // by policy name; render_leaderboard sorts
};

// Per-sample scores (sample_key -> score) of one aggregate's (run, task, policy, budget).
using SampleScoreSource = std::function<std::map<std::string, double>(const AggregateRow&)>;
// Reads them from the store's results table, loading each run once.
SampleScoreSource store_sample_scores(ResultsStore& store);

std::vector<LeaderboardGroup> build_leaderboard(const std::vector<AggregateRow>& rows, const SampleScoreSource& scores,
                                                double iso_threshold = kDefaultIsoThreshold);
// Mean of one metric over a row's compressed budgets (all budgets when only `full` exists).
double compressed_mean(const LeaderboardRow& row, LeaderboardMetric metric);

}  // namespace kvevict::evals
