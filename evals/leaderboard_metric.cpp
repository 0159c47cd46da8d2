#include "evals/leaderboard_metric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <set>

#include "evals/budget_text.h"

namespace kvevict::evals {

namespace {

enum class MetricFormat { Percent, Ratio, Bytes, Rate };

struct MetricInfo {
  LeaderboardMetric metric;
  const char* name;
  double AggregateRow::*field;
  bool lower_is_better;
  MetricFormat format;
};

// Percent-like figures and rates print with one decimal, ratios with three, bytes with a prefix.
constexpr MetricInfo kMetrics[] = {
    {LeaderboardMetric::Score, "score", &AggregateRow::score, false, MetricFormat::Percent},
    {LeaderboardMetric::KeptRatio, "kept_ratio", &AggregateRow::kept_ratio, true, MetricFormat::Ratio},
    {LeaderboardMetric::KvBytes, "kv_bytes", &AggregateRow::kv_bytes, true, MetricFormat::Bytes},
    {LeaderboardMetric::DeviceKvBytes, "device_kv_bytes", &AggregateRow::device_kv_bytes, true, MetricFormat::Bytes},
    {LeaderboardMetric::TtftMs, "ttft_ms", &AggregateRow::ttft_ms, true, MetricFormat::Rate},
    {LeaderboardMetric::DecodeTokS, "decode_tok_s", &AggregateRow::decode_tok_s, false, MetricFormat::Rate},
};
static_assert(std::size(kMetrics) == static_cast<size_t>(LeaderboardMetric::Count), "one row per metric");

constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kMetrics); ++i)
    if (static_cast<size_t>(kMetrics[i].metric) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kMetrics is indexed by the enum");

const MetricInfo& info(LeaderboardMetric metric) {
  const size_t i = static_cast<size_t>(metric);
  return kMetrics[i < std::size(kMetrics) ? i : 0];
}

}  // namespace

std::optional<LeaderboardMetric> parse_leaderboard_metric(const std::string& name) {
  for (const MetricInfo& m : kMetrics)
    if (name == m.name) return m.metric;
  return std::nullopt;
}

const char* metric_name(LeaderboardMetric metric) { return info(metric).name; }

std::vector<std::string> metric_names() {
  std::vector<std::string> names;
  for (const MetricInfo& m : kMetrics) names.emplace_back(m.name);
  return names;
}

double metric_value(const AggregateRow& row, LeaderboardMetric metric) { return row.*info(metric).field; }

bool lower_is_better(LeaderboardMetric metric) { return info(metric).lower_is_better; }

std::string format_bytes(double bytes) {
  if (std::isnan(bytes)) return "-";
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  double value = bytes;
  while (std::fabs(value) >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[48];
  if (unit == 0) std::snprintf(text, sizeof(text), "%.0f B", value);
  else if (std::fabs(value) < 10) std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  else if (std::fabs(value) < 100) std::snprintf(text, sizeof(text), "%.1f %s", value, units[unit]);
  else std::snprintf(text, sizeof(text), "%.0f %s", value, units[unit]);
  return text;
}

std::string format_metric(double value, LeaderboardMetric metric) {
  if (std::isnan(value)) return "-";
  const MetricFormat format = info(metric).format;
  if (format == MetricFormat::Bytes) return format_bytes(value);
  char text[64];
  std::snprintf(text, sizeof(text), format == MetricFormat::Ratio ? "%.3f" : "%.1f", value);
  return text;
}

std::vector<std::string> ordered_budgets(const std::vector<AggregateRow>& rows) {
  std::set<std::string> unique;
  for (const auto& row : rows) unique.insert(row.budget);
  std::vector<std::string> budgets(unique.begin(), unique.end());
  std::stable_sort(budgets.begin(), budgets.end(),
                   [](const std::string& a, const std::string& b) { return budget_sort_key(a) < budget_sort_key(b); });
  return budgets;
}

}  // namespace kvevict::evals
