#pragma once
// Leaderboard rendering of the store's aggregates. `table` and `md` print one block per (model,
// task): one row per policy, one column per budget, the chosen metric in each cell, rows sorted
// best first by their mean over budgets (lower first for ttft_ms and kv_bytes). `csv` and `json`
// print one record per (model, task, policy, budget) with every figure.
#include <string>
#include <vector>

#include "evals/results_store.h"

namespace kvevict::evals {

enum class LeaderboardFormat { Table, Markdown, Csv, Json };
// score | kept_ratio | kv_bytes | ttft_ms | decode_tok_s
std::string render_leaderboard(const std::vector<AggregateRow>& rows, LeaderboardFormat format,
                               const std::string& metric = "score");
bool is_leaderboard_metric(const std::string& metric);
double metric_value(const AggregateRow& row, const std::string& metric);
// Budgets in display order (fractions, then token counts, then full).
std::vector<std::string> ordered_budgets(const std::vector<AggregateRow>& rows);
std::string csv_field(const std::string& text);

}  // namespace kvevict::evals
