#pragma once
// The figure a leaderboard cell shows (--metric), parsed once from its name, and the formatting of
// figures: human-readable bytes ("8.96 MiB"), scores with one decimal. One table row per metric
// (leaderboard_metric.cpp, tied to the enum by static_assert): its name, its field of AggregateRow,
// its order and its format.
#include <optional>
#include <string>
#include <vector>

#include "evals/results_store.h"

namespace kvevict::evals {

enum class LeaderboardMetric { Score, KeptRatio, KvBytes, DeviceKvBytes, TtftMs, DecodeTokS, Count };

// score | kept_ratio | kv_bytes | device_kv_bytes | ttft_ms | decode_tok_s
std::optional<LeaderboardMetric> parse_leaderboard_metric(const std::string& name);
const char* metric_name(LeaderboardMetric metric);
// Every metric's name in enum order (the CLI's choices).
std::vector<std::string> metric_names();
// The cell's figure; NaN where the run did not measure it (device_kv_bytes on the CPU).
double metric_value(const AggregateRow& row, LeaderboardMetric metric);
bool lower_is_better(LeaderboardMetric metric);
std::string format_metric(double value, LeaderboardMetric metric);

// Bytes with a binary prefix and three significant digits: "512 B", "1.50 KiB", "8.96 MiB", "123 MiB".
std::string format_bytes(double bytes);
// Budgets in display order (fractions, then token counts, then full).
std::vector<std::string> ordered_budgets(const std::vector<AggregateRow>& rows);

}  // namespace kvevict::evals
