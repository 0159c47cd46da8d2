#pragma once
// Independent references for the field policies that need small linear algebra over the head
// dimension (policies/field/leverage.yaml, compactor.yaml, cap.yaml), written from kvpress's
// formulas (LeverageScorePress, CompactorPress, CapPress, as the files' `about` lines cite them)
// in double, from the raw recorded queries, keys and values of every prompt position, NOT from the
// DSL, the interpreter or dsl/matrix_ops. The k x k and d x d systems are solved here by
// Gauss-Jordan elimination in long double (another route than the DSL's Cholesky).
// kvpress draws its Gaussian sketch from torch's generator; ours is the documented stream
// kv_dsl_randn (core/engine/gaussian_rng.h), used here directly, so kept sets are comparable.
// Ties: higher score first, then smaller position. At prefill the cache slot is the position.
#include <cstdint>
#include <vector>

#include "core/model/model.h"
#include "reference_policies.h"

namespace kvevict::reference {

// What the prompt left behind, with the pre-RoPE keys the engine's K_pre signal carries.
struct LinalgPrompt {
  int S = 0, L = 0, Hq = 0, Hkv = 0, G = 1, d = 0;
  std::vector<std::vector<float>> q;                   // [layer][S][Hq][d] post-RoPE queries
  std::vector<std::vector<std::vector<float>>> k;      // [layer][kv head][S][d] post-RoPE
  std::vector<std::vector<std::vector<float>>> k_pre;  // [layer][kv head][S][d] pre-RoPE (the cache's own inverse)
  std::vector<std::vector<std::vector<float>>> v;      // [layer][kv head][S][d]
  std::vector<double> inv_freq;                        // RoPE inverse frequency of each pair (d / 2)
  bool half_split = false;                             // RoPE pairs (i, i + d/2) instead of (2i, 2i + 1)
};
LinalgPrompt record_linalg(const Model& model, const std::vector<int>& tokens);

// LeverageScorePress: centred pre-RoPE keys (over tokens lo..hi-1) times the Gaussian sketch
// randn[d, e] / sqrt(k), k = min(sketch, d); scores x_t^T (X^T X + 1e-2 I)^-1 x_t clamped at 0 (the
// first try of chol_with_jitter); 0 outside lo..hi-1.
std::vector<double> leverage_scores(const LinalgPrompt& p, int layer, int kv_head, int sketch, uint64_t seed, int lo, int hi);
KeptSets leverage(const LinalgPrompt& p, int budget, int sketch, uint64_t seed);

// CompactorPress with the deviations compactor.yaml documents: per-head z-scores (kvpress: over the
// layer), and the attention term is the chunked non-causal attention of the whole prompt (chunks
// from position 0; kvpress: of the prompt without its sinks), times |v|, avg-pooled (3) within the
// unprotected span, z-scored there; blend * leverage_z + attention_z; `start` first and `end` last
// tokens protected.
struct CompactorParams {
  int start = 8, end = 4, chunk = 256, sketch = 48;
  double blending = 0.35;
  uint64_t seed = 0;
};
// The blended score of every position of (layer l, KV head kv); 0 at the protected positions.
std::vector<double> compactor_scores(const LinalgPrompt& p, int l, int kv, const CompactorParams& cp);
KeptSets compactor(const LinalgPrompt& p, int budget, const CompactorParams& cp);

// CapPress: mu_h = the averaged future RoPE (positions S .. S + future - 1) of the mean pre-RoPE
// query of head h over positions sinks .. S-1; w_ht = exp(tau cos(k_t, mu_h) - max); score =
// mean over the group of w_ht v_t^T (I + sum_t (w_ht + eps) v_t v_t^T)^-1 v_t over t >= sinks;
// the first `sinks` tokens protected.
struct CapParams {
  double tau = 5.0, epsilon = 1e-6;
  int future = 512, sinks = 4;
};
KeptSets cap(const LinalgPrompt& p, int budget, const CapParams& cp);

}  // namespace kvevict::reference
