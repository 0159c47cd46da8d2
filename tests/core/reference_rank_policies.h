#pragma once
// Independent references for the field policies that use the rank and sort statistics of the
// policy language (dsl/sort_ops.h) and the out_norm_l1 signal, written from each method's formula
// in double from the recorded window attention, values and the model's W_o (reference::collect),
// NOT from the DSL or the engine's selection. Ties: higher score first, then smaller position, then
// lower KV head (the engine's documented rule).
#include "core/model/model.h"
#include "reference_policies.h"

namespace kvevict::reference {

// mean over the query heads h of KV head kv_head's group of ||W_o,h v||_1, from the model's f32
// W_o ([dim][n_heads * head_dim]).
double group_out_norm_l1(const Model& model, int layer, int kv_head, int G, const float* v);

// DefensiveKV as policies/field/defensive_kv.yaml documents it (its header lists the deviations
// from the official code): per KV head, over the n = S - window non-window tokens,
//   x[h, w, t] = avgpool_k(A)[h, w, t] / sum_t avgpool_k(A)[h, w, .] * sum_t A[h, w, .]
//   s2[t] = max(max_{h, w} x[h, w, t], mean_t max_{h, w} x) * mean_h ||W_o,h v_t||_1
// CriticalKV stage 1: u = mean_{h, w} A / its sum; sorted descending (ties: lower position), an
// entry is lifted when the sum of u up to and including it is < threshold - bias, bias the mean over
// (h, w) of the attention on the `window` tokens before the window; lifted entries rank above every
// other, among themselves by u. The layer's heads share one pool of H (budget - window) entries
// (Ada-KV without a floor); the window is kept.
KeptSets defensive_kv(const PromptData& p, const Model& model, int budget, int window, int kernel, double threshold);

// The top budget entries of each head by the group mean of ||W_o,h v_t||_1 (the signal alone).
KeptSets out_norm_l1_topk(const PromptData& p, const Model& model, int budget);

}  // namespace kvevict::reference
