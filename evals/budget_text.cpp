#include "evals/budget_text.h"

#include <cmath>
#include <cstdlib>

#include "core/util/error.h"

namespace kvevict::evals {
// budget = "full" | number "%" | number   (the grammar of Budget::parse, which does the work)
Budget parse_budget_text(const std::string& text, const std::string& what) {
  return Budget::parse(text, what.empty() ? "bad budget" : what);
}

double budget_sort_key(const std::string& text) {
  if (text == "full") return 1e18;
  // Percentages, then per-head token counts (excl_window:N beside N), then totals; each ascending.
  if (text.rfind("total:", 0) == 0) return 1e15 + std::atof(text.c_str() + 6);
  if (text.rfind("excl_window:", 0) == 0) return 1000.0 + std::atof(text.c_str() + 12) + 0.5;
  double value = std::atof(text.c_str());
  return !text.empty() && text.back() == '%' ? value : 1000.0 + value;
}

}  // namespace kvevict::evals
