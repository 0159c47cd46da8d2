#include "evals/leaderboard.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvevict::evals {
namespace {

using Grid = TextGrid;

std::string model_name(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string percent_text(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g%%", fraction * 100);
  return text;
}

std::string format_n(const LeaderboardRow& row) {
  int64_t low = INT64_MAX, high = 0;
  for (const auto& [budget, cell] : row.cells) {
    low = std::min(low, cell.score.n);
    high = std::max(high, cell.score.n);
  }
  return low == high ? std::to_string(low) : std::to_string(low) + "-" + std::to_string(high);
}

void print_markdown(std::ostringstream& out, const Grid& grid) {
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
}

void print_table(std::ostringstream& out, const Grid& grid) {
  std::vector<size_t> widths(grid[0].size(), 0);
  for (const auto& line : grid) {
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  }
  for (size_t r = 0; r < grid.size(); ++r) {
    for (size_t c = 0; c < grid[r].size(); ++c) {
      const std::string& cell = grid[r][c];
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

nlohmann::json number_or_null(double value) { return std::isnan(value) ? nlohmann::json(nullptr) : nlohmann::json(value); }

nlohmann::json json_record(const LeaderboardGroup& group, const LeaderboardRow& row, const LeaderboardCell& cell) {
  const AggregateRow& a = cell.aggregate;
  nlohmann::json diff = nullptr;
  if (cell.vs_full.n > 0) {
    diff = {{"mean", cell.vs_full.mean},          {"low", cell.vs_full.interval.low},
            {"high", cell.vs_full.interval.high}, {"n", cell.vs_full.n},
            {"significant", cell.vs_full.significant()}};
  }
  return {{"model", group.model},
          {"task", group.task},
          {"policy", row.policy},
          {"policy_hash", a.policy_hash},
          {"budget", a.budget},
          {"score", a.score},
          {"samples", cell.score.n},
          {"n", cell.score.n},
          {"score_low", number_or_null(cell.score.interval.low)},
          {"score_high", number_or_null(cell.score.interval.high)},
          {"interval", interval_method_name(cell.score.interval.method)},
          {"diff_full", diff},
          {"kv_bytes", a.kv_bytes},
          {"kv_bytes_full", a.kv_bytes_full},
          {"device_kv_bytes", number_or_null(a.device_kv_bytes)},
          {"kept_ratio", a.kept_ratio},
          {"ttft_ms", a.ttft_ms},
          {"decode_tok_s", a.decode_tok_s},
          {"run_id", a.run_id},
          {"scoring", a.scoring.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.scoring)},
          {"prefill_attention", a.prefill_attention},
          {"prefill", a.prefill},
          {"policy_mean", number_or_null(compressed_mean(row, LeaderboardMetric::Score))},
          {"iso",
           {{"kept_fraction", row.iso.position == IsoPosition::Undefined ? nlohmann::json(nullptr)
                                                                          : nlohmann::json(row.iso.kept_fraction)},
            {"position", iso_position_name(row.iso.position)},
            {"text", iso_quality_text(row.iso)}}}};
}

// The values of one run field over a group's cells ("interpreter", "interpreter and cuda"); an
// empty value counts as `empty`.
std::string cell_values(const LeaderboardGroup& group, std::string AggregateRow::*field, const std::string& empty) {
  std::set<std::string> values;
  for (const auto& row : group.rows)
    for (const auto& [budget, cell] : row.cells) {
      const std::string& value = cell.aggregate.*field;
      values.insert(value.empty() ? empty : value);
    }
  std::string text;
  for (const auto& v : values) text += (text.empty() ? "" : " and ") + v;
  return text.empty() ? empty : text;
}

// "scored by interpreter", plus the prefill attention where a cell's is not the default own and the
// prefill mode where a cell's is not shared (every run before the eval could choose them was own and
// shared: titles of such runs stay as they were).
std::string provenance_text(const LeaderboardGroup& group) {
  std::string text = "scored by " + cell_values(group, &AggregateRow::scoring, "not recorded");
  const std::string attention = cell_values(group, &AggregateRow::prefill_attention, "own");
  if (attention != "own") text += "; prefill attention " + attention;
  const std::string mode = cell_values(group, &AggregateRow::prefill, "shared");
  return mode == "shared" ? text : text + "; prefill " + mode;
}

std::string csv_number(double value, const char* format) {
  if (std::isnan(value)) return "";
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string csv_record(const LeaderboardGroup& group, const LeaderboardRow& row, const LeaderboardCell& cell) {
  const AggregateRow& a = cell.aggregate;
  const PairedDifference& d = cell.vs_full;
  const bool has_diff = d.n > 0;
  std::string line = csv_field(group.model) + "," + csv_field(group.task) + "," + csv_field(row.policy) + "," +
                     csv_field(a.budget) + "," + csv_number(a.score, "%.4f") + "," + std::to_string(cell.score.n) +
                     "," + csv_number(a.kv_bytes, "%.0f") + "," + csv_number(a.kv_bytes_full, "%.0f") + "," +
                     csv_number(a.kept_ratio, "%.4f") + "," + csv_number(a.ttft_ms, "%.3f") + "," +
                     csv_number(a.decode_tok_s, "%.3f") + "," + std::to_string(a.run_id) + ",";
  line += csv_number(cell.score.interval.low, "%.4f") + "," + csv_number(cell.score.interval.high, "%.4f") + "," +
          interval_method_name(cell.score.interval.method) + ",";
  line += (has_diff ? csv_number(d.mean, "%.4f") + "," + csv_number(d.interval.low, "%.4f") + "," +
                          csv_number(d.interval.high, "%.4f") + "," + std::to_string(d.n)
                    : std::string(",,,")) +
          ",";
  line += csv_number(compressed_mean(row, LeaderboardMetric::Score), "%.4f") + "," +
          (row.iso.position == IsoPosition::Undefined ? "" : csv_number(row.iso.kept_fraction, "%.6f")) + "," +
          iso_position_name(row.iso.position) + "," + csv_field(a.scoring) + "," + csv_field(a.prefill_attention) + "," +
          csv_field(a.prefill) + "," + csv_number(a.device_kv_bytes, "%.0f") + "\n";
  return line;
}

}  // namespace

Grid score_grid(const LeaderboardGroup& group, const LeaderboardOptions& options) {
  const bool score = options.metric == LeaderboardMetric::Score;
  std::vector<std::string> header{"policy"};
  for (const auto& budget : group.budgets) header.push_back(budget);
  header.push_back("mean");
  if (score) header.push_back("iso@" + percent_text(options.iso_threshold));
  header.push_back("n");
  Grid grid{header};
  for (const LeaderboardRow* row : sorted_rows(group, options)) {
    std::vector<std::string> line{row->policy};
    for (const auto& budget : group.budgets) {
      auto it = row->cells.find(budget);
      if (it == row->cells.end()) line.push_back("-");
      else if (score) line.push_back(format_with_interval(it->second.aggregate.score, it->second.score.interval));
      else line.push_back(format_metric(metric_value(it->second.aggregate, options.metric), options.metric));
    }
    line.push_back(format_metric(compressed_mean(*row, options.metric), options.metric));
    if (score) line.push_back(iso_quality_text(row->iso));
    line.push_back(format_n(*row));
    grid.push_back(line);
  }
  return grid;
}

// The paired difference to full per compressed budget; empty when no cell has one.
Grid difference_grid(const LeaderboardGroup& group, const LeaderboardOptions& options) {
  std::vector<std::string> header{"policy"};
  for (const auto& budget : group.budgets) {
    if (budget != "full") header.push_back(budget);
  }
  Grid grid{header};
  bool any = false;
  for (const LeaderboardRow* row : sorted_rows(group, options)) {
    std::vector<std::string> line{row->policy};
    for (const auto& budget : group.budgets) {
      if (budget == "full") continue;
      auto it = row->cells.find(budget);
      if (it == row->cells.end() || it->second.vs_full.n == 0) {
        line.push_back("-");
        continue;
      }
      const PairedDifference& d = it->second.vs_full;
      any = true;
      line.push_back((d.significant() ? "* " : "") + format_with_interval(d.mean, d.interval));
    }
    grid.push_back(line);
  }
  return any && header.size() > 1 ? grid : Grid{};
}

std::string format_with_interval(double value, const Interval& interval) {
  char text[96];
  if (std::isnan(interval.low) || interval.method == IntervalMethod::None)
    std::snprintf(text, sizeof(text), "%.1f", value);
  else
    std::snprintf(text, sizeof(text), "%.1f [%.1f, %.1f]", value, interval.low, interval.high);
  return text;
}

std::vector<const LeaderboardRow*> sorted_rows(const LeaderboardGroup& group, const LeaderboardOptions& options) {
  std::vector<std::pair<std::pair<double, double>, const LeaderboardRow*>> order;
  for (const auto& row : group.rows) {
    double mean = compressed_mean(row, options.metric);
    if (std::isnan(mean)) mean = lower_is_better(options.metric) ? INFINITY : -INFINITY;
    double by_mean = lower_is_better(options.metric) ? mean : -mean;
    double first = options.sort == LeaderboardSort::Iso ? iso_sort_key(row.iso) : by_mean;
    order.push_back({{first, by_mean}, &row});
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const LeaderboardRow*> rows;
  for (const auto& [key, row] : order) rows.push_back(row);
  return rows;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string render_leaderboard(const std::vector<AggregateRow>& rows, LeaderboardFormat format,
                               const LeaderboardOptions& options) {
  return render_leaderboard(build_leaderboard(rows, nullptr, options.iso_threshold), format, options);
}

std::string render_leaderboard(const std::vector<LeaderboardGroup>& groups, LeaderboardFormat format,
                               const LeaderboardOptions& options) {
  std::ostringstream out;
  if (format == LeaderboardFormat::Json) {
    nlohmann::json records = nlohmann::json::array();
    for (const auto& group : groups) {
      for (const LeaderboardRow* row : sorted_rows(group, options)) {
        for (const auto& budget : group.budgets) {
          auto it = row->cells.find(budget);
          if (it != row->cells.end()) records.push_back(json_record(group, *row, it->second));
        }
      }
    }
    out << records.dump(2) << "\n";
    return out.str();
  }
  if (format == LeaderboardFormat::Csv) {
    out << "model,task,policy,budget,score,samples,kv_bytes,kv_bytes_full,kept_ratio,ttft_ms,decode_tok_s,run_id,"
           "score_low,score_high,interval,diff_full,diff_full_low,diff_full_high,diff_full_n,policy_mean,"
           "iso_kept_fraction,iso_position,scoring,prefill_attention,prefill,device_kv_bytes\n";
    for (const auto& group : groups) {
      for (const LeaderboardRow* row : sorted_rows(group, options)) {
        for (const auto& budget : group.budgets) {
          auto it = row->cells.find(budget);
          if (it != row->cells.end()) out << csv_record(group, *row, it->second);
        }
      }
    }
    return out.str();
  }
  const bool score = options.metric == LeaderboardMetric::Score;
  const std::string unit = score ? "score 0-100 [95% interval]" : metric_name(options.metric);
  const std::string order = options.sort == LeaderboardSort::Iso ? "smallest iso-quality budget first" : "best mean first";
  const std::string notes = std::string("mean over compressed budgets, full excluded") +
                            (score ? "; iso = smallest kept fraction keeping " + percent_text(options.iso_threshold) + " of the full score" : "") + "; " + order;
  const std::string diff_title = "difference to full (score - full, paired on the same samples; * = interval excludes 0)";
  for (const auto& group : groups) {
    Grid scores = score_grid(group, options);
    Grid diffs = score ? difference_grid(group, options) : Grid{};
    const std::string scored_by = provenance_text(group);
    if (format == LeaderboardFormat::Markdown) {
      out << "### " << group.task << " — " << model_name(group.model) << " (" << unit << ")\n\n";
      out << "_" << notes << "; " << scored_by << "_\n\n";
      print_markdown(out, scores);
      if (!diffs.empty()) {
        out << "_" << diff_title << "_\n\n";
        print_markdown(out, diffs);
      }
      continue;
    }
    out << group.task << " — " << model_name(group.model) << " (" << unit << "; " << notes << "; " << scored_by << ")\n";
    print_table(out, scores);
    if (!diffs.empty()) {
      out << diff_title << "\n";
      print_table(out, diffs);
    }
  }
  if (groups.empty()) out << "no finished runs match\n";
  return out.str();
}

}  // namespace kvevict::evals
