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
//     Cam      (kvpress CAMPress): not a nearest-key rule; see merge_cam.h.
//   Where the rows are read and written (the search and the folds): core/decode/row_merges.h, run by
//   `rows` (a decoder's device cache, DeviceKvMirror) or, when null, by the host cache itself
//   (host_row_merges.h). Each rule above is one fold per target, computed as row_merges.h states
//   (double, fused multiply-adds, terms in cache order, rounded once to the cache's KvType); Pivot
//   as x_j <- ((1 + |M_j|/2) x_j + sum x_e / 2) / (1 + |M_j|); Nearest's |v| from value_norms.
//   Positions do not change. The caller then compacts.
// Memory: O(|E| * head_dim) for the evicted rows, plus the kept keys once (|kept| * head_dim floats)
// on the host path; never T x T. Time O(|E| * |kept| * head_dim) for the search.
// A codebook-backed head throws std::logic_error (the merge-on-evict methods and the codebook are
// one merge: section, so a policy cannot have both); unfold_gqa is rejected by the engine checks
// (its eviction does not go through the engine's per-head keep).
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/decode/row_merges.h"
#include "core/engine/policy_program.h"

namespace kvevict {

struct MergeOnEvictCounts {
  int64_t evicted = 0;  // entries folded or dropped
  int64_t merged = 0;   // evicted entries that passed the similarity gate
};

// merge.method d2o's state per layer: D2O's EMA similarity threshold (none before the layer's
// first merge of a prompt).
struct D2oThreshold {
  bool set = false;
  double value = 0;
};

// What a merge method reads beyond the head's rows. The engine fills it at every eviction
// (MergeOnEvictState::context, merge_state.h); Nearest, Pivot and Weighted read none of it.
struct MergeContext {
  std::span<const float> scores;       // Cam: the scores the selection ranked, one per entry (cache order)
  std::vector<float> attention;        // Cam: each entry's accumulated decode-time attention (GQA mean)
  int new_entries = 0;                 // Cam: tokens appended to the layer since its last eviction
  uint64_t seed = 0;                   // Cam: the eviction's seed (counter_rng.h, kMergeStream)
  std::span<const int32_t> positions;  // Cam: the entries' original positions (the draw's key)
};

// Whether `merge`'s method reads MergeContext::scores (only Cam ranks its candidates by them). A
// merge that does not may run on kept lists selected where the scores were made, with no host copy
// of them (the engine's decode_scores_in_selector); Cam refuses empty scores (merge_cam.h).
inline bool merge_reads_selection_scores(const PolicyMerge& merge) {
  return merge.enabled && merge.method == MergeMethod::Cam;
}

// `merge.method` must be Nearest, Pivot, Weighted or Cam (std::logic_error otherwise: D2o is a
// layer-level rule, merge_on_evict_layer below; Cam runs
// merge_cam, merge_cam.h, on `context`); kept as for KVCache::keep (each index in range, no
// duplicates; std::invalid_argument otherwise).
MergeOnEvictCounts merge_on_evict(const PolicyMerge& merge, KVCache& cache, int layer, int stored_head,
                                  std::span<const int> kept, const MergeContext& context = {},
                                  CachedRowMerges* rows = nullptr);


// merge.method d2o (D2O, Wan et al., arXiv 2406.13035; AIoT-MLSys-Lab/D2O D2O_LayerKVCache), one
// eviction of a whole layer: kept[h] are stored head h's kept indices (as for merge_on_evict), one
// per stored head. Every head's evicted entries find their target and cosine s_e as above; m =
// the mean of s_e over all the layer's evicted entries; the threshold becomes m at the layer's
// first merge and ema_alpha * threshold + ema_beta * m afterwards (nothing evicted: unchanged); e
// merges when s_e >= threshold, and per target j with merged set M_j, for x in {k, v}:
//   x_j <- (x_j + sum s_e x_e) / (1 + |M_j|)          (scatter_reduce mean, include_self, of s_e x_e)
// `rows` as for merge_on_evict. Memory: each head's evicted rows at once, O(sum_h |E_h| x d). Throws as merge_on_evict, and
// std::invalid_argument when kept does not have one set per stored head.
MergeOnEvictCounts merge_on_evict_layer(const PolicyMerge& merge, KVCache& cache, int layer,
                                        const std::vector<std::vector<int>>& kept, D2oThreshold& threshold,
                                        CachedRowMerges* rows = nullptr);

}  // namespace kvevict
