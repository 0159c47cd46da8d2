#include "evals/svg_plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace kvevict::evals {
namespace {

const char* const kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// Red (0) through yellow (50) to green (100).
std::string score_colour(double score) {
  if (std::isnan(score)) return "#dddddd";
  double t = std::clamp(score / 100.0, 0.0, 1.0);
  int red = t < 0.5 ? 215 : static_cast<int>(215 - (t - 0.5) * 2 * 189);
  int green = t < 0.5 ? static_cast<int>(48 + t * 2 * 167) : static_cast<int>(215 - (t - 0.5) * 2 * 65);
  int blue = 48;
  // Room for any three ints in %02x (8 hex digits each): GCC cannot see that the formulas above
  // stay within [0, 255].
  char text[32];
  std::snprintf(text, sizeof(text), "#%02x%02x%02x", red, green, blue);
  return text;
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

void open_svg(std::ostringstream& svg, double width, double height, const std::string& title) {
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<title>" << xml_escape(title) << "</title>\n";
  svg << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title)
      << "</text>\n";
}

std::string percent_tick(double fraction) {
  char text[32];
  std::snprintf(text, sizeof(text), fraction * 100 >= 1 ? "%.0f%%" : "%.1f%%", fraction * 100);
  return text;
}

}  // namespace

std::string svg_log_fraction_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                                   const std::vector<CurveSeries>& series, double y_min, double y_max) {
  const double width = 760, height = 440, left = 60, right = 220, top = 40, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  double x_min = 1;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      if (p.x > 0) x_min = std::min(x_min, p.x);
    }
  }
  const double log_lo = std::log10(x_min) - 0.1, log_hi = 0.02;  // a margin so end points are not on the frame
  auto x_at = [&](double x) { return left + plot_w * (std::log10(x) - log_lo) / (log_hi - log_lo); };
  auto y_at = [&](double v) { return top + plot_h * (1 - (std::clamp(v, y_min, y_max) - y_min) / (y_max - y_min)); };
  std::ostringstream svg;
  open_svg(svg, width, height, title);
  for (int k = 0; k <= 5; ++k) {
    double v = y_min + (y_max - y_min) * k / 5;
    svg << "<line x1=\"" << left << "\" y1=\"" << y_at(v) << "\" x2=\"" << left + plot_w << "\" y2=\"" << y_at(v)
        << "\" stroke=\"#e0e0e0\"/>\n";
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y_at(v) + 4 << "\" text-anchor=\"end\">" << number(v) << "</text>\n";
  }
  // Ticks at 1-2-5 steps of each decade within the axis.
  for (int decade = static_cast<int>(std::floor(log_lo)); decade <= 0; ++decade) {
    for (double step : {1.0, 2.0, 5.0}) {
      double x = step * std::pow(10.0, decade);
      if (std::log10(x) < log_lo || x > 1.0 + 1e-9) continue;
      svg << "<line x1=\"" << number(x_at(x)) << "\" y1=\"" << top << "\" x2=\"" << number(x_at(x)) << "\" y2=\""
          << top + plot_h << "\" stroke=\"#eeeeee\"/>\n";
      svg << "<text x=\"" << number(x_at(x)) << "\" y=\"" << top + plot_h + 18 << "\" text-anchor=\"middle\">"
          << percent_tick(x) << "</text>\n";
    }
  }
  svg << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w << "\" y2=\"" << top + plot_h
      << "\" stroke=\"black\"/>\n";
  svg << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + plot_h
      << "\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 15 << "\" text-anchor=\"middle\">"
      << xml_escape(x_label) << "</text>\n";
  svg << "<text x=\"15\" y=\"" << top + plot_h / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 15 "
      << top + plot_h / 2 << ")\">" << xml_escape(y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* colour = kPalette[s % std::size(kPalette)];
    std::vector<CurvePoint> points;
    for (const auto& p : series[s].points) {
      if (p.x > 0) points.push_back(p);
    }
    std::string upper, lower, line;
    for (const auto& p : points) {
      line += number(x_at(p.x)) + "," + number(y_at(p.y)) + " ";
      if (!std::isnan(p.low) && !std::isnan(p.high)) {
        upper += number(x_at(p.x)) + "," + number(y_at(p.high)) + " ";
        lower = number(x_at(p.x)) + "," + number(y_at(p.low)) + " " + lower;
      }
    }
    svg << "<g class=\"series\" data-policy=\"" << xml_escape(series[s].name) << "\">\n";
    if (!upper.empty()) {
      svg << "<polygon class=\"band\" fill=\"" << colour << "\" fill-opacity=\"0.12\" stroke=\"none\" points=\"" << upper
          << lower << "\"/>\n";
    }
    if (!line.empty()) {
      svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\"" << line << "\"/>\n";
    }
    for (const auto& p : points) {
      svg << "<circle cx=\"" << number(x_at(p.x)) << "\" cy=\"" << number(y_at(p.y)) << "\" r=\"3\" fill=\"" << colour
          << "\"/>\n";
    }
    svg << "</g>\n";
    double legend_y = top + 10 + 18 * s;
    svg << "<line x1=\"" << width - right + 15 << "\" y1=\"" << legend_y << "\" x2=\"" << width - right + 35
        << "\" y2=\"" << legend_y << "\" stroke=\"" << colour << "\" stroke-width=\"3\"/>\n";
    svg << "<text x=\"" << width - right + 40 << "\" y=\"" << legend_y + 4 << "\">" << xml_escape(series[s].name)
        << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

std::string svg_bar_chart(const std::string& title, const std::string& x_label, const std::vector<Bar>& bars) {
  const double bar_h = 22, left = 150, right = 110, top = 40, bottom = 50, width = 760;
  const double plot_w = width - left - right;
  const double height = top + bar_h * std::max<size_t>(1, bars.size()) + bottom;
  std::ostringstream svg;
  open_svg(svg, width, height, title);
  const double plot_bottom = top + bar_h * bars.size();
  for (int k = 0; k <= 4; ++k) {
    double x = left + plot_w * k / 4;
    svg << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << plot_bottom
        << "\" stroke=\"#e0e0e0\"/>\n";
    svg << "<text x=\"" << x << "\" y=\"" << plot_bottom + 16 << "\" text-anchor=\"middle\">" << k * 25 << "%</text>\n";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + bar_h * i;
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + bar_h / 2 + 4 << "\" text-anchor=\"end\">"
        << xml_escape(bars[i].label) << "</text>\n";
    double end = left;
    if (!std::isnan(bars[i].value)) {
      const double w = plot_w * std::clamp(bars[i].value, 0.0, 1.0);
      svg << "<rect class=\"bar\" x=\"" << left << "\" y=\"" << y + 3 << "\" width=\"" << number(w) << "\" height=\""
          << bar_h - 6 << "\" fill=\"" << kPalette[bars[i].colour % std::size(kPalette)] << "\""
          << (bars[i].bound ? " fill-opacity=\"0.35\"" : "") << "/>\n";
      end += w;
    }
    svg << "<text x=\"" << number(end + 6) << "\" y=\"" << y + bar_h / 2 + 4 << "\">" << xml_escape(bars[i].text)
        << "</text>\n";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 12 << "\" text-anchor=\"middle\">"
      << xml_escape(x_label) << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

std::string svg_heatmap(const std::string& title, const std::string& x_label, const std::string& y_label,
                        const std::vector<std::string>& x_ticks, const std::vector<std::string>& y_ticks,
                        const std::vector<std::vector<double>>& cells) {
  const double cell_w = 64, cell_h = 28, left = 80, top = 44, bottom = 50;
  const double width = left + cell_w * std::max<size_t>(1, x_ticks.size()) + 20;
  const double height = top + cell_h * std::max<size_t>(1, y_ticks.size()) + bottom;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << width / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"13\">" << xml_escape(title)
      << "</text>\n";
  for (size_t r = 0; r < y_ticks.size(); ++r) {
    double y = top + cell_h * r;
    svg << "<text x=\"" << left - 6 << "\" y=\"" << y + cell_h / 2 + 4 << "\" text-anchor=\"end\">"
        << xml_escape(y_ticks[r]) << "</text>\n";
    for (size_t c = 0; c < x_ticks.size(); ++c) {
      double v = r < cells.size() && c < cells[r].size() ? cells[r][c] : std::nan("");
      double x = left + cell_w * c;
      svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cell_w << "\" height=\"" << cell_h << "\" fill=\""
          << score_colour(v) << "\" stroke=\"white\"/>\n";
      if (!std::isnan(v)) {
        svg << "<text x=\"" << x + cell_w / 2 << "\" y=\"" << y + cell_h / 2 + 4 << "\" text-anchor=\"middle\">"
            << number(v) << "</text>\n";
      }
    }
  }
  for (size_t c = 0; c < x_ticks.size(); ++c) {
    svg << "<text x=\"" << left + cell_w * c + cell_w / 2 << "\" y=\"" << top + cell_h * y_ticks.size() + 16
        << "\" text-anchor=\"middle\">" << xml_escape(x_ticks[c]) << "</text>\n";
  }
  svg << "<text x=\"" << left + cell_w * x_ticks.size() / 2 << "\" y=\"" << height - 10 << "\" text-anchor=\"middle\">"
      << xml_escape(x_label) << "</text>\n";
  svg << "<text x=\"14\" y=\"" << top + cell_h * y_ticks.size() / 2 << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 "
      << top + cell_h * y_ticks.size() / 2 << ")\">" << xml_escape(y_label) << "</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace kvevict::evals
