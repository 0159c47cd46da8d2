#pragma once
// How `kvevict inspect --plan` shows an eviction plan (core/engine/eviction_plan.h) as one JSON
// object: {"policy","budget","prompt_tokens","geometry":{...},"window","window_rows","query_window",
// "protect":{"first","recent"},"budget_plan":{"kind","tokens_per_head","total","protected_floor",
// "layer_rule","head_rule","layers":[...] (static only)},"select":{...},"prefill":{...},
// "decode":{...},"stages":{...}}. Modes are spelled as in policy files (policy_modes.h); the plan's
// own rules as lower-case words (uniform, weighted, ...). Per-head budgets are not listed: under
// head rule "layer" every stored head has its layer's budget.
#include <string>

#include <nlohmann/json.hpp>

#include "core/engine/eviction_plan.h"

namespace kvevict::cli {

nlohmann::json eviction_plan_json(const EvictionPlan& plan, const std::string& policy, const std::string& budget);

}  // namespace kvevict::cli
