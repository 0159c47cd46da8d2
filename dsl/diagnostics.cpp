#include "dsl/diagnostics.h"

#include <algorithm>
#include <sstream>

namespace kvevict::dsl {

Diagnostics::Diagnostics(std::string file_name, std::string file_text) : file_name_(std::move(file_name)) {
  std::string line;
  std::istringstream in(file_text);
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines_.push_back(line);
  }
}

void Diagnostics::error(FilePos pos, const std::string& message) {
  // The same mistake reached through two paths (e.g. a name used twice in one expression) is
  // reported once.
  for (const auto& d : errors_)
    if (d.pos.line == pos.line && d.pos.col == pos.col && d.message == message) return;
  errors_.push_back({pos, message});
}

std::string Diagnostics::format() const {
  std::vector<Diagnostic> sorted = errors_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.col < b.pos.col;
  });
  std::ostringstream out;
  for (const auto& d : sorted) {
    out << file_name_;
    if (d.pos.line > 0) out << ':' << d.pos.line << ':' << std::max(1, d.pos.col);
    out << ": error: " << d.message << '\n';
    if (d.pos.line > 0 && d.pos.line <= static_cast<int>(lines_.size())) {
      const std::string& src = lines_[d.pos.line - 1];
      out << src << '\n';
      std::string caret;
      for (int i = 0; i + 1 < d.pos.col && i < static_cast<int>(src.size()); ++i) caret += src[i] == '\t' ? '\t' : ' ';
      out << caret << "^\n";
    }
  }
  return out.str();
}

}  // namespace kvevict::dsl
