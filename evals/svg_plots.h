#pragma once
// Hand-written SVG: a log-x line chart with interval bands, a bar chart and a heatmap. No plotting
// library.
#include <string>
#include <vector>

namespace kvevict::evals {

// One policy's curve: points sorted by x, each with its interval (NaN bounds: no band there).
struct CurvePoint {
  double x = 0, y = 0, low = 0, high = 0;
};
struct CurveSeries {
  std::string name;
  std::vector<CurvePoint> points;
};

// Lines over a log10 x axis (x in (0, 1], drawn as percent: 1%, 2%, 5%, 10%, ... 100%), each with a
// translucent band from low to high and a legend entry. Points with x <= 0 are left out.
std::string svg_log_fraction_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                                   const std::vector<CurveSeries>& series, double y_min, double y_max);

// Horizontal bars, one per label, value in [0, 1] drawn as percent of the axis; `text` is printed
// after the bar (NaN value: no bar, only the text). A `bound` bar (the value is a limit, not a
// measurement) is drawn lighter.
struct Bar {
  std::string label;
  double value = 0;
  std::string text;
  bool bound = false;
  size_t colour = 0;  // palette index: pass the series index so a policy keeps its line's colour
};
std::string svg_bar_chart(const std::string& title, const std::string& x_label, const std::vector<Bar>& bars);

// cells[row][column] in [0, 100] or NaN (drawn grey).
std::string svg_heatmap(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<std::string>& x_ticks, const std::vector<std::string>& y_ticks,
                        const std::vector<std::vector<double>>& cells);

// Escapes &, <, >, " and ' for XML/HTML text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace kvevict::evals
