#pragma once
// Budget text -> Budget via Budget::parse (core/engine/budget.h), and the display order of budgets.
#include <string>

#include "core/engine/budget.h"

namespace kvevict::evals {

// Throws UsageError("<what or 'bad budget'>: ...") for a malformed budget.
Budget parse_budget_text(const std::string& text, const std::string& what);
// Sort key: fractions and token counts ascending, "full" last.
double budget_sort_key(const std::string& text);

}  // namespace kvevict::evals
