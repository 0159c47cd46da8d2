#include "evals/budget_text.h"

#include <cmath>
#include <cstdlib>

#include "core/util/error.h"

namespace kvevict::evals {
namespace {

bool parse_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(value);
}

}  // namespace

// budget = "full" | number "%" | number
Budget parse_budget_text(const std::string& text, const std::string& what) {
  Budget budget;
  budget.text = text;
  if (text == "full") {
    budget.kind = Budget::Kind::Full;
    budget.value = 1.0;
    return budget;
  }
  double value = 0;
  if (!text.empty() && text.back() == '%') {
    if (!parse_number(text.substr(0, text.size() - 1), value) || value <= 0 || value > 100) {
      throw UsageError((what.empty() ? "" : what + ": ") + "bad budget '" + text + "' (a percentage must be in (0, 100])");
    }
    budget.kind = Budget::Kind::Fraction;
    budget.value = value / 100.0;
    return budget;
  }
  if (!parse_number(text, value) || value <= 0) {
    throw UsageError((what.empty() ? "" : what + ": ") + "bad budget '" + text + "' (expected \"full\", a percentage like \"10%\" or a positive "
                     "number of tokens per KV head like \"128\")");
  }
  budget.kind = Budget::Kind::TokensPerHead;
  budget.value = value;
  return budget;
}

double budget_sort_key(const std::string& text) {
  if (text == "full") return 1e18;
  double value = std::atof(text.c_str());
  // Percentages before token counts; each ascending.
  return !text.empty() && text.back() == '%' ? value : 1000.0 + value;
}

}  // namespace kvevict::evals
