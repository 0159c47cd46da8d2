#pragma once
// Independent references for the selection rules beyond fixed top-k and the field files that use
// them (policies/field/dms.yaml, composed.yaml; select.scope model, layer_allocation mass), written
// from each method's rule in double from raw recorded signals (keys, window attention), NOT from the
// DSL or the engine's selection code. Ties: higher score first, then smaller original position (then
// lower layer, lower head for the model-wide pool), the engine's documented rule.
#include <cstdint>
#include <functional>
#include <vector>

#include "reference_field_policies.h"
#include "reference_policies.h"

namespace kvevict::reference {

// -|k| of every cached entry in double (KnormPress), cache order.
std::vector<double> knorm_scores(const CachedHead& c, int d);

// One DMSPress decision on a head as held: the `window` newest entries (by position) stay, every
// older entry whose score (cache order) is >= threshold stays, and when more than `cap` would stay,
// the window (newest first) and then the best-scored passing entries up to `cap`. Kept positions,
// ascending.
std::vector<int32_t> dms_keep(const CachedHead& c, const std::vector<double>& score, int cap, int window,
                              double threshold);

// The same at prefill on every head of the prompt, with KnormPress scores.
KeptSets dms_prefill(const PromptData& p, int cap, int window, double threshold);

// kvpress ComposedPress([SnapKVPress(r1, window = p's W, kernel), KnormPress(r2)]) at prefill: SnapKV
// keeps int(S (1 - r1)) (window tokens above all), Knorm keeps int(n1 (1 - r2)) of those, at most
// `budget`.
KeptSets composed_snapkv_knorm(const PromptData& p, int budget, int kernel, double r1, double r2);

// One top-k over the KnormPress scores of every (layer, KV head): each head keeps its `recent`
// newest positions, and the best sum(budget - recent) other entries of the whole model stay.
KeptSets knorm_model_wide(const PromptData& p, int budget, int recent);

// The fewest entries whose positive scores, sorted descending and divided by their sum, reach p.
int mass_count(std::vector<double> score, double p);

}  // namespace kvevict::reference
