#pragma once
// merge.method cam: CaM cache merging as kvpress's CAMPress does it (kvpress/presses/cam_press.py;
// Zhang et al., "CaM: Cache Merging for Memory-efficient LLMs Inference", ICML 2024,
// openreview LCTmppB165). Called by merge_on_evict (merge_on_evict.h) for that method, before the
// engine compacts a head to the entries a decode-time selection kept.
//
// Contract, per (layer, stored head) holding T entries, kept = the selection's indices (any
// order), E = the other entries in cache order, A = context.attention (each entry's attention
// accumulated over the decode steps so far, the mean over the head's query group), S =
// context.scores (what the selection ranked), m = merge.merge_budget:
//   candidates C = the min(context.new_entries, |E|) evicted entries of highest S, ties to the
//     later cache index (kvpress: the layer_step_counts best-scored evicted, flip + stable sort);
//     a NaN score ranks lowest.
//   k_0 < k_1 < ... < k_{K-1}: the kept indices sorted. For e in C, s(e) = the number of kept
//     indices below e, window W_e = k_{s(e)} .. k_{min(s(e) + m, K) - 1} (the next m kept entries
//     after e in cache order: kvpress's searchsorted(right) on the sorted kept indices), a_e = |W_e|.
//     a_e = 0 (no kept entry after e): e does not merge.
//   p_e = clamp(A_e / mean_{j in W_e} A_j, 0, 1); a NaN ratio (0 / 0) gives 0, an infinite one 1.
//   u_e = counter_uniform(context.seed, layer, stored_head, context.positions[e], kMergeStream)
//     (counter_rng.h); e merges when u_e < p_e, a Bernoulli(p_e) draw (torch.bernoulli) that is a
//     pure function of the seed, the head and the entry's original position: runs are reproducible.
//   Every j in W_e of a merged e: v_j <- v_j + sum v_e / a_e over the merged e whose window holds
//     j, in cache order of e: one fold per such j (core/decode/row_merges.h: weights 1 / a_e, fused
//     multiply-adds in double, rounded once to the cache's KvType), run by `rows` where the rows are
//     (the host cache, or a decoder's device cache). Keys, positions and unmerged rows do not change.
// Memory: the sorted kept indices and one prefix sum of A over them (O(K)) and the folds' terms (at
// most merge_budget per merged entry); time O(|E| log |E| + K log K) plus the folds' O(terms x d).
// Sizes of context.scores / attention / positions other than T are an engine bug: std::logic_error.
#include <span>

#include "core/decode/kv_cache.h"
#include "core/decode/row_merges.h"
#include "core/engine/merge_on_evict.h"
#include "core/engine/policy_program.h"

namespace kvevict {

// `is_kept`: T flags, 1 for the entries of `kept` (merge_on_evict has checked `kept`).
MergeOnEvictCounts merge_cam(const PolicyMerge& merge, const KVCache& cache, int layer, int stored_head,
                             std::span<const int> kept, std::span<const char> is_kept, const MergeContext& context,
                             CachedRowMerges& rows);

}  // namespace kvevict
