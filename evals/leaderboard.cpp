#include "evals/leaderboard.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "evals/budget_text.h"

namespace kvevict::evals {
namespace {

struct Group {
  std::string model, task;
  std::vector<const AggregateRow*> rows;
};

std::string format_value(double value, const std::string& metric) {
  char text[64];
  if (metric == "kv_bytes") {
    if (value >= 1 << 20) std::snprintf(text, sizeof(text), "%.1f MiB", value / (1 << 20));
    else std::snprintf(text, sizeof(text), "%.1f KiB", value / 1024);
  } else if (metric == "kept_ratio") {
    std::snprintf(text, sizeof(text), "%.3f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.1f", value);
  }
  return text;
}

bool lower_is_better(const std::string& metric) { return metric == "ttft_ms" || metric == "kv_bytes" || metric == "kept_ratio"; }

std::vector<Group> group_rows(const std::vector<AggregateRow>& rows) {
  std::vector<Group> groups;
  for (const auto& row : rows) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.model == row.model && g.task == row.task; });
    if (it == groups.end()) {
      groups.push_back({row.model, row.task, {}});
      it = groups.end() - 1;
    }
    it->rows.push_back(&row);
  }
  return groups;
}

std::string model_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Renders one group as a grid of strings: header row, then one row per policy (best first).
std::vector<std::vector<std::string>> group_grid(const Group& group, const std::string& metric) {
  std::vector<AggregateRow> copies;
  for (const auto* row : group.rows) copies.push_back(*row);
  std::vector<std::string> budgets = ordered_budgets(copies);
  std::map<std::string, std::map<std::string, const AggregateRow*>> cells;
  std::map<std::string, int64_t> samples;
  for (const auto* row : group.rows) {
    cells[row->policy][row->budget] = row;
    samples[row->policy] = std::max(samples[row->policy], row->samples);
  }
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [policy, by_budget] : cells) {
    double sum = 0;
    for (const auto& [budget, row] : by_budget) sum += metric_value(*row, metric);
    double mean = sum / by_budget.size();
    order.push_back({lower_is_better(metric) ? mean : -mean, policy});
  }
  std::sort(order.begin(), order.end());
  std::vector<std::vector<std::string>> grid;
  std::vector<std::string> header{"policy"};
  for (const auto& budget : budgets) header.push_back(budget);
  header.push_back("mean");
  header.push_back("samples");
  grid.push_back(header);
  for (const auto& [key, policy] : order) {
    std::vector<std::string> line{policy};
    for (const auto& budget : budgets) {
      auto it = cells[policy].find(budget);
      line.push_back(it == cells[policy].end() ? "-" : format_value(metric_value(*it->second, metric), metric));
    }
    line.push_back(format_value(lower_is_better(metric) ? key : -key, metric));
    line.push_back(std::to_string(samples[policy]));
    grid.push_back(line);
  }
  return grid;
}

}  // namespace

bool is_leaderboard_metric(const std::string& metric) {
  return metric == "score" || metric == "kept_ratio" || metric == "kv_bytes" || metric == "ttft_ms" ||
         metric == "decode_tok_s";
}

double metric_value(const AggregateRow& row, const std::string& metric) {
  if (metric == "kept_ratio") return row.kept_ratio;
  if (metric == "kv_bytes") return row.kv_bytes;
  if (metric == "ttft_ms") return row.ttft_ms;
  if (metric == "decode_tok_s") return row.decode_tok_s;
  return row.score;
}

std::vector<std::string> ordered_budgets(const std::vector<AggregateRow>& rows) {
  std::set<std::string> unique;
  for (const auto& row : rows) unique.insert(row.budget);
  std::vector<std::string> budgets(unique.begin(), unique.end());
  std::stable_sort(budgets.begin(), budgets.end(),
                   [](const std::string& a, const std::string& b) { return budget_sort_key(a) < budget_sort_key(b); });
  return budgets;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string render_leaderboard(const std::vector<AggregateRow>& rows, LeaderboardFormat format, const std::string& metric) {
  std::ostringstream out;
  if (format == LeaderboardFormat::Json) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& row : rows) {
      records.push_back({{"model", row.model},          {"task", row.task},
                         {"policy", row.policy},        {"budget", row.budget},
                         {"score", row.score},          {"samples", row.samples},
                         {"kv_bytes", row.kv_bytes},    {"kv_bytes_full", row.kv_bytes_full},
                         {"kept_ratio", row.kept_ratio}, {"ttft_ms", row.ttft_ms},
                         {"decode_tok_s", row.decode_tok_s}, {"run_id", row.run_id}});
    }
    out << records.dump(2) << "\n";
    return out.str();
  }
  if (format == LeaderboardFormat::Csv) {
    out << "model,task,policy,budget,score,samples,kv_bytes,kv_bytes_full,kept_ratio,ttft_ms,decode_tok_s,run_id\n";
    for (const auto& row : rows) {
      char numbers[256];
      std::snprintf(numbers, sizeof(numbers), "%.4f,%lld,%.0f,%.0f,%.4f,%.3f,%.3f,%lld", row.score,
                    static_cast<long long>(row.samples), row.kv_bytes, row.kv_bytes_full, row.kept_ratio, row.ttft_ms,
                    row.decode_tok_s, static_cast<long long>(row.run_id));
      out << csv_field(row.model) << "," << csv_field(row.task) << "," << csv_field(row.policy) << ","
          << csv_field(row.budget) << "," << numbers << "\n";
    }
    return out.str();
  }
  const std::string unit = metric == "score" ? "score 0-100" : metric;
  for (const auto& group : group_rows(rows)) {
    auto grid = group_grid(group, metric);
    if (format == LeaderboardFormat::Markdown) {
      out << "### " << group.task << " — " << model_name(group.model) << " (" << unit << ")\n\n";
      for (size_t r = 0; r < grid.size(); ++r) {
        out << "|";
        for (const auto& cell : grid[r]) out << " " << cell << " |";
        out << "\n";
        if (r == 0) {
          out << "|";
          for (size_t c = 0; c < grid[r].size(); ++c) out << (c == 0 ? "---|" : "---:|");
          out << "\n";
        }
      }
      out << "\n";
      continue;
    }
    std::vector<size_t> widths(grid[0].size(), 0);
    for (const auto& line : grid) {
      for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
    }
    out << group.task << " — " << model_name(group.model) << " (" << unit << ", best first)\n";
    for (size_t r = 0; r < grid.size(); ++r) {
      for (size_t c = 0; c < grid[r].size(); ++c) {
        std::string cell = grid[r][c];
        std::string pad(widths[c] - cell.size(), ' ');
        out << (c == 0 ? cell + pad : "  " + pad + cell);
      }
      out << "\n";
      if (r == 0) {
        size_t total = 0;
        for (size_t w : widths) total += w + 2;
        out << std::string(total - 2, '-') << "\n";
      }
    }
    out << "\n";
  }
  if (rows.empty()) out << "no finished runs match\n";
  return out.str();
}

}  // namespace kvevict::evals
