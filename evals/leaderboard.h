#pragma once
// Leaderboard rendering. `table` and `md` print per (model, task) a score grid (one row per policy,
// one column per budget, each cell "mean [95% interval]"), then the paired difference to the full
// cache per cell ("* " where its interval excludes 0). Columns `mean` (over the compressed budgets,
// `full` excluded), `iso@95%` (evals/stats_iso_quality.h) and `n` (samples per cell). Rows sorted
// best first by mean (lower first for ttft_ms, kv_bytes, kept_ratio) or by iso-quality budget.
// `csv` and `json` print one record per (model, task, policy, budget) with every figure; json's
// figures are numbers (null where there is none), csv leaves those fields empty.
#include <string>
#include <vector>

#include "evals/leaderboard_metric.h"
#include "evals/leaderboard_stats.h"
#include "evals/results_store.h"

namespace kvevict::evals {

enum class LeaderboardFormat { Table, Markdown, Csv, Json };
enum class LeaderboardSort { Mean, Iso };

struct LeaderboardOptions {
  LeaderboardMetric metric = LeaderboardMetric::Score;  // cell value of table / md
  LeaderboardSort sort = LeaderboardSort::Mean;
  double iso_threshold = kDefaultIsoThreshold;  // for the column title; build_leaderboard applies it
};

std::string render_leaderboard(const std::vector<LeaderboardGroup>& groups, LeaderboardFormat format,
                               const LeaderboardOptions& options = {});
// From aggregates alone: no per-sample scores, so no intervals or paired differences (n from the
// aggregate). For a store, build_leaderboard(rows, store_sample_scores(store)) gives them.
std::string render_leaderboard(const std::vector<AggregateRow>& rows, LeaderboardFormat format,
                               const LeaderboardOptions& options = {});
// The table / md grids: header row first. score_grid: one row per policy (sorted), budgets, mean,
// iso (score only) and n. difference_grid: the paired difference to full per compressed budget,
// "* " before a cell whose interval excludes 0; empty when no cell has a full reference.
using TextGrid = std::vector<std::vector<std::string>>;
TextGrid score_grid(const LeaderboardGroup& group, const LeaderboardOptions& options);
TextGrid difference_grid(const LeaderboardGroup& group, const LeaderboardOptions& options);
// Rows of a group in the order `options` asks for.
std::vector<const LeaderboardRow*> sorted_rows(const LeaderboardGroup& group, const LeaderboardOptions& options);
std::string csv_field(const std::string& text);
// "62.5 [40.0, 80.0]"; "62.5" without an interval.
std::string format_with_interval(double value, const Interval& interval);

}  // namespace kvevict::evals
