#pragma once
// Hand-written SVG: a line chart (categorical x axis) and a heatmap. No plotting library.
#include <string>
#include <vector>

namespace kvevict::evals {

struct LineSeries {
  std::string name;
  std::vector<double> values;  // one per x label; NaN = missing
};

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<std::string>& x_ticks, const std::vector<LineSeries>& series,
                           double y_min, double y_max);

// cells[row][column] in [0, 100] or NaN (drawn grey).
std::string svg_heatmap(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<std::string>& x_ticks, const std::vector<std::string>& y_ticks,
                        const std::vector<std::vector<double>>& cells);

// Escapes &, <, >, " and ' for XML/HTML text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace kvevict::evals
