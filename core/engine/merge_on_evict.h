#pragma once
// Merge-on-evict (policy file `merge: {method: nearest | pivot | weighted}`): before the engine
// compacts a head to the entries a selection kept, every evicted entry is folded into one kept
// entry, so its information is not simply dropped. One function, called by the engine wherever it
// evicts (prefill one-shot or cascading, and every decode trigger: EvictionEngine's `keep`).
//
// Contract, per (layer, stored head) holding T entries, kept = the selection's indices:
//   E = the entries not in kept (cache order). Nothing happens when E or kept is empty.
//   target(e) = the kept entry j of highest cosine cos(k_e, k_j) between the keys AS CACHED
//     (post-RoPE, at each entry's own position: what kvpress's presses and KVCache-Factory's
//     merge_kv see; they merge post-RoPE keys too), norms clamped at 1e-6 as torch's normalize /
//     kvpress's clamp do; ties go to the first in `kept` order. Protected entries are targets too.
//   e is merged only when cos(k_e, k_target) >= merge.similarity_threshold.
//   Per target j with merged set M_j (s_e = the cosine above, k/v = original rows):
//     Nearest  (kvpress MergingPress): keys unchanged;
//              w_e = max(s_e, 0) * |v_e| / (|v_e| + |v_j| + 1e-6);  when sum w_e > 0:
//              v_j <- (v_j + sum w_e v_e) / (1 + sum w_e)
//     Pivot    (KVCache-Factory merge "pivot", LOOK-M): for x in {k, v}:
//              x_j <- (x_j + sum (x_e + x_j) / 2) / (1 + |M_j|)      (scatter_reduce mean, include_self)
//     Weighted (KVCache-Factory merge "weighted", KVMerger-style): for x in {k, v}:
//              w_e = max((s_e + 1) / 2, 1e-6);  x_j <- (x_j + sum w_e x_e) / (1 + sum w_e)
//   Merged rows are computed in double from the stored rows (as f32) and written back once, rounded
//   to the cache's KvType (F32, F16 or BF16); positions do not change. The caller then compacts.
// Memory: O(|E| * head_dim) for the evicted rows and the merge accumulators, plus the kept keys
// once (|kept| * head_dim floats) and one row of |kept| float cosines; never T x T. Time
// O(|E| * |kept| * head_dim), in vectorised float to shortlist each target, then double on the
// shortlist (the result is the all-double search's: merge_on_evict.cpp, find_targets).
// A codebook-backed head throws std::logic_error (the merge-on-evict methods and the codebook are
// one merge: section, so a policy cannot have both); unfold_gqa is rejected by the engine checks
// (its eviction does not go through the engine's per-head keep).
#include <cstdint>
#include <span>

#include "core/decode/kv_cache.h"
#include "core/engine/policy_program.h"

namespace kvevict {

struct MergeOnEvictCounts {
  int64_t evicted = 0;  // entries folded or dropped
  int64_t merged = 0;   // evicted entries that passed the similarity gate
};

// `merge.method` must be Nearest, Pivot or Weighted (std::logic_error otherwise); kept as for
// KVCache::keep (each index in range, no duplicates; std::invalid_argument otherwise).
MergeOnEvictCounts merge_on_evict(const PolicyMerge& merge, KVCache& cache, int layer, int stored_head,
                                  std::span<const int> kept);

}  // namespace kvevict
