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

std::string cell(const std::string& text) { return "<td>" + xml_escape(text) + "</td>"; }

std::string provenance_table(ResultsStore& store, const std::vector<AggregateRow>& rows) {
  std::set<int64_t> ids;
  for (const auto& row : rows) ids.insert(row.run_id);
  std::string html =
      "<table class=\"provenance\" id=\"provenance\">\n<tr><th>run</th><th>name</th><th>model</th><th>model SHA-256</th>"
      "<th>kvevict</th><th>commit</th><th>config hash</th><th>started</th><th>finished</th><th>device</th>"
      "<th>backend</th><th>prefill attention</th><th>prefill</th></tr>\n";
  for (int64_t id : ids) {
    auto run = store.run(id);
    if (!run) continue;
    html += "<tr>" + cell(std::to_string(run->id)) + cell(run->name) + cell(run->model) +
            "<td class=\"hash\">" + xml_escape(run->model_hash) + "</td>" + cell(run->kvevict_version) +
            cell(run->git_commit) + "<td class=\"hash\">" + xml_escape(run->config_hash) + "</td>" +
            cell(run->started_at) + cell(run->finished_at) + cell(run->device) +
            cell(run->scoring.empty() ? "not recorded" : run->scoring) + cell(run->prefill_attention) +
            cell(run->prefill) + "</tr>\n";
  }
  return html + "</table>\n<p class=\"note\">backend: how the run's policies were scored (interpreter, host or "
                "cuda); runs stored before schema version 5 did not record it. prefill attention: the decoder's "
                "(own, or flashinfer: 16-bit tensor-core kernel on the CUDA decoder); runs before version 6 ran own. prefill: shared (every (policy, budget) evicts a copy of one "
                "full-cache prefill per sample) or per_run (each evicting one prefills the prompt itself); runs "
                "before version 7 ran shared.</p>\n";
}

// Each policy shown, by content: its leaderboard name, the name or path the config gave, the SHA-256
// of its source text with its resolved parameters, and those parameters.
std::string policy_table(ResultsStore& store, const std::vector<AggregateRow>& rows) {
  std::map<std::string, std::string> shown;  // leaderboard name -> policy hash
  for (const auto& row : rows) shown[row.policy] = row.policy_hash;
  std::string html =
      "<table class=\"provenance\" id=\"policies\">\n<tr><th>policy</th><th>file or name</th><th>source SHA-256</th>"
      "<th>parameters</th></tr>\n";
  for (const auto& [label, hash] : shown) {
    auto policy = hash.empty() ? std::nullopt : store.policy(hash);
    html += "<tr>" + cell(label) + cell(policy ? policy->name : "-") + "<td class=\"hash\">" +
            xml_escape(hash.empty() ? "not recorded (before schema 4)" : hash) + "</td>" +
            cell(policy ? policy->params_json : "-") + "</tr>\n";
  }
  return html + "</table>\n";
}

// One leaderboard grid as an HTML table; a "* " cell (interval excludes 0) is shaded instead.
std::string html_grid(const TextGrid& grid, const std::string& css) {
  std::string html = "<table class=\"" + css + "\">\n";
  for (size_t r = 0; r < grid.size(); ++r) {
    html += "<tr>";
    for (const auto& text : grid[r]) {
      if (r == 0) html += "<th>" + xml_escape(text) + "</th>";
      else if (text.rfind("* ", 0) == 0) html += "<td class=\"significant\">" + xml_escape(text.substr(2)) + "</td>";
      else html += cell(text);
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

std::string metric_table(const LeaderboardGroup& group, LeaderboardMetric metric) {
  std::string html = "<table class=\"" + std::string(metric_name(metric)) + "\">\n<tr><th>policy</th>";
  for (const auto& budget : group.budgets) html += "<th>" + xml_escape(budget) + "</th>";
  html += "</tr>\n";
  LeaderboardOptions options;
  for (const LeaderboardRow* row : sorted_rows(group, options)) {
    html += "<tr>" + cell(row->policy);
    for (const auto& budget : group.budgets) {
      auto it = row->cells.find(budget);
      html += cell(it == row->cells.end() ? "-" : format_metric(metric_value(it->second.aggregate, metric), metric));
    }
    html += "</tr>\n";
  }
  return html + "</table>\n";
}

// Whether some cell of the group has the figure (device bytes exist only for CUDA runs).
bool measured_anywhere(const LeaderboardGroup& group, LeaderboardMetric metric) {
  for (const auto& row : group.rows)
    for (const auto& [budget, c] : row.cells)
      if (!std::isnan(metric_value(c.aggregate, metric))) return true;
  return false;
}

std::vector<CurveSeries> score_curves(const LeaderboardGroup& group) {
  std::vector<CurveSeries> series;
  for (const auto& row : group.rows) {
    CurveSeries curve{row.policy, {}};
    for (const auto& [budget, c] : row.cells) {
      curve.points.push_back({c.aggregate.kept_ratio, c.aggregate.score, c.score.interval.low, c.score.interval.high});
    }
    std::sort(curve.points.begin(), curve.points.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.x < b.x; });
    series.push_back(curve);
  }
  return series;
}

std::vector<Bar> iso_bars(const LeaderboardGroup& group) {
  std::vector<Bar> bars;
  LeaderboardOptions options;
  options.sort = LeaderboardSort::Iso;
  for (const LeaderboardRow* row : sorted_rows(group, options)) {
    double value = row->iso.position == IsoPosition::Undefined ? std::nan("") : row->iso.kept_fraction;
    const size_t colour = static_cast<size_t>(row - group.rows.data());  // the row's line in score_curves
    bars.push_back({row->policy, value, iso_quality_text(row->iso), row->iso.position != IsoPosition::Inside, colour});
  }
  return bars;
}

struct Heatmaps {
  std::string html;
  std::vector<std::string> files;
};

// Heatmaps of the group's (policy, budget) grids that vary; a note names the uniform ones.
Heatmaps write_heatmaps(const std::vector<GridCell>& cells, const LeaderboardGroup& group, const std::string& stem,
                        const std::filesystem::path& out_dir) {
  std::map<std::pair<std::string, std::string>, std::vector<const GridCell*>> maps;  // (policy, budget)
  for (const auto& c : cells) {
    if (c.model == group.model && c.task == group.task && c.depth >= 0) maps[{c.policy, c.budget}].push_back(&c);
  }
  Heatmaps out;
  std::string uniform;
  for (const auto& [pb, list] : maps) {
    std::set<int> lengths;
    std::set<double> depths, scores;
    for (const auto* c : list) {
      lengths.insert(c->length);
      depths.insert(c->depth);
      scores.insert(c->score);
    }
    if (list.size() < 2 || scores.size() < 2) {
      char text[32];
      std::snprintf(text, sizeof(text), "%.1f", *scores.begin());
      uniform += (uniform.empty() ? "" : ", ") + pb.first + " @ " + pb.second + " (" + text + ")";
      continue;
    }
    std::vector<std::string> x_ticks, y_ticks;
    for (int length : lengths) x_ticks.push_back(std::to_string(length));
    for (double depth : depths) y_ticks.push_back(format_depth(depth) + "%");
    std::vector<std::vector<double>> grid(depths.size(), std::vector<double>(lengths.size(), std::nan("")));
    for (const auto* c : list) {
      size_t r = std::distance(depths.begin(), depths.find(c->depth));
      size_t col = std::distance(lengths.begin(), lengths.find(c->length));
      grid[r][col] = c->score;
    }
    std::string name = "heatmap_" + stem + "_" + slug(pb.first) + "_" + slug(pb.second) + ".svg";
    write_file(out_dir / name, svg_heatmap(group.task + ": " + pb.first + " @ " + pb.second, "context length (tokens)",
                                           "depth", x_ticks, y_ticks, grid));
    out.files.push_back((out_dir / name).string());
    out.html += "<img class=\"heatmap\" src=\"" + xml_escape(name) + "\" alt=\"heatmap " + xml_escape(pb.first) + " @ " +
                xml_escape(pb.second) + "\">\n";
  }
  if (maps.empty()) return out;
  std::string html = "<h3>depth x length heatmaps</h3>\n";
  if (!out.html.empty()) html += "<div class=\"maps\">\n" + out.html + "</div>\n";
  if (!uniform.empty()) html += "<p class=\"note\">Not drawn, the same score in every cell: " + xml_escape(uniform) + ".</p>\n";
  out.html = html;
  return out;
}

constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin-bottom:1em}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child{text-align:left}"
    "th{background:#f4f4f4}.provenance td{text-align:left;font-size:90%}.hash{font-family:monospace;font-size:85%;"
    "word-break:break-all;max-width:16em}.significant{background:#fde2e2}.note{color:#555;font-size:90%}"
    ".maps img{margin:4px}img{max-width:100%}";

}  // namespace

ReportFiles write_report(ResultsStore& store, const std::string& out_dir, double iso_threshold) {
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) throw RuntimeError(out_dir + ": cannot create the report folder: " + error.message());
  const std::filesystem::path dir(out_dir);
  ReportFiles files;
  std::vector<AggregateRow> rows = store.leaderboard();
  std::vector<GridCell> cells = store.grid_cells();
  auto groups = build_leaderboard(rows, store_sample_scores(store), iso_threshold);
  LeaderboardOptions options;
  options.iso_threshold = iso_threshold;

  char threshold[32];
  std::snprintf(threshold, sizeof(threshold), "%g%%", iso_threshold * 100);
  std::string body = "<h2>Provenance</h2>\n" + provenance_table(store, rows) + policy_table(store, rows);
  body += "<p class=\"note\">Scores 0-100; [95% interval]: Wilson for cells whose scores are all 0 or 100, else a "
          "percentile bootstrap over samples (2000 resamples, fixed seed). Mean over compressed budgets, full excluded. "
          "iso@" + std::string(threshold) + ": the smallest measured kept fraction of the KV cache keeping " + threshold +
          " of the full-cache score, interpolated linearly; &lt; / &gt; mark values outside the measured budgets.</p>\n";
  for (const auto& group : groups) {
    std::string model_name = std::filesystem::path(group.model).filename().string();
    std::string stem = slug(group.task) + "_" + slug(model_name);
    body += "<section class=\"task\" id=\"" + xml_escape(stem) + "\">\n<h2>" + xml_escape(group.task) + " &#8212; " +
            xml_escape(model_name) + "</h2>\n";
    body += "<h3>score (0-100) [95% interval]</h3>\n" + html_grid(score_grid(group, options), "scores");
    TextGrid diff = difference_grid(group, options);
    if (!diff.empty()) {
      body += "<h3>difference to the full cache (score &#8722; full, paired on the same samples; shaded: the interval "
              "excludes 0)</h3>\n" + html_grid(diff, "diff");
    }
    body += "<h3>KV cache after eviction</h3>\n" + metric_table(group, LeaderboardMetric::KvBytes);
    if (measured_anywhere(group, LeaderboardMetric::DeviceKvBytes))
      body += "<h3>KV cache on the device after eviction (entries and codebooks; - where not measured)</h3>\n" +
              metric_table(group, LeaderboardMetric::DeviceKvBytes);
    body += "<h3>decode tokens/s</h3>\n" + metric_table(group, LeaderboardMetric::DecodeTokS);

    std::string curve = "score_" + stem + ".svg";
    write_file(dir / curve, svg_log_fraction_chart(group.task + " — " + model_name, "kept fraction of the KV cache (log)",
                                                   "score (0-100)", score_curves(group), 0, 100));
    files.svgs.push_back((dir / curve).string());
    body += "<p><img class=\"plot\" src=\"" + xml_escape(curve) + "\" alt=\"score against kept fraction\"></p>\n";
    std::string bars = "iso_" + stem + ".svg";
    write_file(dir / bars, svg_bar_chart(group.task + ": iso-quality budget (" + threshold + " of full)",
                                         "kept fraction of the KV cache", iso_bars(group)));
    files.svgs.push_back((dir / bars).string());
    body += "<p><img class=\"plot\" src=\"" + xml_escape(bars) + "\" alt=\"iso-quality budgets\"></p>\n";

    Heatmaps heatmaps = write_heatmaps(cells, group, stem, dir);
    files.svgs.insert(files.svgs.end(), heatmaps.files.begin(), heatmaps.files.end());
    body += heatmaps.html + "</section>\n";
  }
  if (groups.empty()) body = "<p>No finished runs in the database.</p>\n";
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kvevict report</title>\n"
                     "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n<h1>kvevict report</h1>\n" + body +
                     "</body>\n</html>\n";
  files.index = (dir / "index.html").string();
  write_file(files.index, html);
  return files;
}

}  // namespace kvevict::evals
