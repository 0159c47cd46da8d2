#pragma once
// What the eviction engine accepts from a policy description and a budget, checked once when an
// engine is built: ranges (random share, temperature, window, protected counts, decode trigger),
// the selection scope and kept order, the combinations the engine cannot honour together (unfolded
// GQA with cascading, a layer-wide scope, re-assigned positions or same-index scoring;
// same_index_head with A_acc/A_now or re-assigned positions), the codebook layer range, and the budget's unit against the
// model. Throws UsageError (exit 2) naming the policy.
#include "core/engine/budget.h"
#include "core/engine/policy_program.h"
#include "core/model/model_config.h"

namespace kvevict {

void check_engine_supports(const PolicyDescription& desc, const ModelConfig& config, const Budget& budget);

}  // namespace kvevict
