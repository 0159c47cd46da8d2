#include "evals/report.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/util/error.h"
#include "evals/leaderboard.h"
#include "evals/svg_plots.h"
#include "evals/tasks/task_types.h"

namespace kvevict::evals {
namespace {

// File-name-safe version of a label.
std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return out;
}

void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  if (!out) throw RuntimeError(path.string() + ": cannot write report file");
}

std::string html_table(const std::vector<AggregateRow>& rows, const std::string& metric) {
  std::vector<std::string> budgets = ordered_budgets(rows);
  std::map<std::string, std::map<std::string, double>> cells;
  for (const auto& row : rows) cells[row.policy][row.budget] = metric_value(row, metric);
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [policy, by_budget] : cells) {
    double sum = 0;
    for (const auto& [b, v] : by_budget) sum += v;
    order.push_back({-sum / by_budget.size(), policy});
  }
  std::sort(order.begin(), order.end());
  std::string html = "<table>\n<tr><th>policy</th>";
  for (const auto& budget : budgets) html += "<th>" + xml_escape(budget) + "</th>";
  html += "</tr>\n";
  for (const auto& [key, policy] : order) {
    html += "<tr><td>" + xml_escape(policy) + "</td>";
    for (const auto& budget : budgets) {
      auto it = cells[policy].find(budget);
      char text[32] = "-";
      if (it != cells[policy].end()) std::snprintf(text, sizeof(text), "%.1f", it->second);
      html += "<td>" + std::string(text) + "</td>";
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

}  // namespace

ReportFiles write_report(ResultsStore& store, const std::string& out_dir) {
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) throw RuntimeError(out_dir + ": cannot create the report folder: " + error.message());
  ReportFiles files;
  std::vector<AggregateRow> rows = store.leaderboard();
  std::vector<GridCell> cells = store.grid_cells();

  std::map<std::pair<std::string, std::string>, std::vector<AggregateRow>> groups;  // (model, task)
  for (const auto& row : rows) groups[{row.model, row.task}].push_back(row);

  std::string body;
  for (const auto& [key, group] : groups) {
    const auto& [model, task] = key;
    std::string model_name = std::filesystem::path(model).filename().string();
    body += "<h2>" + xml_escape(task) + " &#8212; " + xml_escape(model_name) + "</h2>\n";
    body += "<h3>score (0-100)</h3>\n" + html_table(group, "score");
    body += "<h3>KV cache bytes after eviction</h3>\n" + html_table(group, "kv_bytes");
    body += "<h3>decode tokens/s</h3>\n" + html_table(group, "decode_tok_s");

    std::vector<std::string> budgets = ordered_budgets(group);
    std::map<std::string, std::vector<double>> by_policy;
    for (const auto& row : group) {
      auto& values = by_policy[row.policy];
      values.resize(budgets.size(), std::nan(""));
      size_t at = std::find(budgets.begin(), budgets.end(), row.budget) - budgets.begin();
      values[at] = row.score;
    }
    std::vector<LineSeries> series;
    for (const auto& [policy, values] : by_policy) series.push_back({policy, values});
    std::string name = "score_" + slug(task) + "_" + slug(model_name) + ".svg";
    write_file(std::filesystem::path(out_dir) / name,
               svg_line_chart(task + " — " + model_name, "budget", "score (0-100)", budgets, series, 0, 100));
    files.svgs.push_back((std::filesystem::path(out_dir) / name).string());
    body += "<p><img src=\"" + xml_escape(name) + "\" alt=\"score against budget\"></p>\n";

    // Heatmaps for tasks with a depth axis.
    std::map<std::pair<std::string, std::string>, std::vector<const GridCell*>> maps;  // (policy, budget)
    for (const auto& cell : cells) {
      if (cell.model == model && cell.task == task && cell.depth >= 0) maps[{cell.policy, cell.budget}].push_back(&cell);
    }
    if (maps.empty()) continue;
    body += "<h3>depth x length heatmaps</h3>\n<div class=\"maps\">\n";
    for (const auto& [pb, list] : maps) {
      std::set<int> lengths;
      std::set<double> depths;
      for (const auto* cell : list) {
        lengths.insert(cell->length);
        depths.insert(cell->depth);
      }
      std::vector<std::string> x_ticks, y_ticks;
      for (int length : lengths) x_ticks.push_back(std::to_string(length));
      for (double depth : depths) y_ticks.push_back(format_depth(depth) + "%");
      std::vector<std::vector<double>> grid(depths.size(), std::vector<double>(lengths.size(), std::nan("")));
      for (const auto* cell : list) {
        size_t r = std::distance(depths.begin(), depths.find(cell->depth));
        size_t c = std::distance(lengths.begin(), lengths.find(cell->length));
        grid[r][c] = cell->score;
      }
      std::string map_name = "heatmap_" + slug(task) + "_" + slug(model_name) + "_" + slug(pb.first) + "_" +
                             slug(pb.second) + ".svg";
      write_file(std::filesystem::path(out_dir) / map_name,
                 svg_heatmap(task + ": " + pb.first + " @ " + pb.second, "context length (tokens)", "depth", x_ticks,
                             y_ticks, grid));
      files.svgs.push_back((std::filesystem::path(out_dir) / map_name).string());
      body += "<img src=\"" + xml_escape(map_name) + "\" alt=\"heatmap\">\n";
    }
    body += "</div>\n";
  }
  if (groups.empty()) body = "<p>No finished runs in the database.</p>\n";
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kvevict report</title>\n"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}"
      "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child{text-align:left}"
      ".maps img{margin:4px}</style>\n</head>\n<body>\n<h1>kvevict report</h1>\n" +
      body + "</body>\n</html>\n";
  files.index = (std::filesystem::path(out_dir) / "index.html").string();
  write_file(files.index, html);
  return files;
}

}  // namespace kvevict::evals
