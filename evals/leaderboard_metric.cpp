#include "evals/leaderboard_metric.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "evals/budget_text.h"

namespace kvevict::evals {

std::optional<LeaderboardMetric> parse_leaderboard_metric(const std::string& name) {
  if (name == "score") return LeaderboardMetric::Score;
  if (name == "kept_ratio") return LeaderboardMetric::KeptRatio;
  if (name == "kv_bytes") return LeaderboardMetric::KvBytes;
  if (name == "ttft_ms") return LeaderboardMetric::TtftMs;
  if (name == "decode_tok_s") return LeaderboardMetric::DecodeTokS;
  return std::nullopt;
}

const char* metric_name(LeaderboardMetric metric) {
  switch (metric) {
    case LeaderboardMetric::Score: return "score";
    case LeaderboardMetric::KeptRatio: return "kept_ratio";
    case LeaderboardMetric::KvBytes: return "kv_bytes";
    case LeaderboardMetric::TtftMs: return "ttft_ms";
    case LeaderboardMetric::DecodeTokS: return "decode_tok_s";
  }
  return "score";
}

double metric_value(const AggregateRow& row, LeaderboardMetric metric) {
  switch (metric) {
    case LeaderboardMetric::KeptRatio: return row.kept_ratio;
    case LeaderboardMetric::KvBytes: return row.kv_bytes;
    case LeaderboardMetric::TtftMs: return row.ttft_ms;
    case LeaderboardMetric::DecodeTokS: return row.decode_tok_s;
    case LeaderboardMetric::Score: break;
  }
  return row.score;
}

bool lower_is_better(LeaderboardMetric metric) {
  return metric == LeaderboardMetric::TtftMs || metric == LeaderboardMetric::KvBytes ||
         metric == LeaderboardMetric::KeptRatio;
}

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
  if (metric == LeaderboardMetric::KvBytes) return format_bytes(value);
  char text[64];
  std::snprintf(text, sizeof(text), metric == LeaderboardMetric::KeptRatio ? "%.3f" : "%.1f", value);
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
