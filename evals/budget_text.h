#pragma once
// Budget text -> Budget, with the grammar of core/engine/budget.h ("full", "N%" with 0 < N <= 100,
// or a positive number of tokens per (layer, KV head)). Kept here so configs validate without the
// engine library.
#include <string>

#include "core/engine/budget.h"

namespace kvevict::evals {

// Throws UsageError("<what>: ...") for anything else.
Budget parse_budget_text(const std::string& text, const std::string& what);
// Sort key: fractions and token counts ascending, "full" last.
double budget_sort_key(const std::string& text);

}  // namespace kvevict::evals
