#pragma once
// Model-wide selection (policy file `select.scope: model`): one top-k over the scores of every
// (layer, KV head) of the model, decided once after the last layer is prefilled. Every head keeps
// its protected entries (they count inside its layer's budget, as everywhere); the free budgets of
// all heads, sum over (l, h) of layer_budget[l] - |protected of (l, h)| (each clamped to the
// head's candidates), form one pool, and the top `pool` candidate entries over the whole model
// (tie rule: higher score first, NaN last, then smaller position, lower layer, lower head) are
// kept wherever they are. So the total kept equals the total budget (per-head budget x layers x
// heads) while each head's count is an output. The scores of different layers must be comparable
// (Layer-DefensiveKV, LAVa: normalised attention mass); that is the policy's business.
//
// Memory: one entry record per candidate of the model (bounded by the cache), freed on return.
#include <cstdint>
#include <span>
#include <vector>

namespace kvevict {

// scores[l][h], positions[l][h]: aligned with head (l, h)'s cache order. Returns the kept cache
// indices per [layer][head], ascending position (or by rank then protected with score_order).
std::vector<std::vector<std::vector<int>>> select_model_wide(
    const std::vector<std::vector<std::span<const float>>>& scores,
    const std::vector<std::vector<std::span<const int32_t>>>& positions, const std::vector<int>& layer_budget,
    int protect_first, int protect_recent, bool score_order);

}  // namespace kvevict
