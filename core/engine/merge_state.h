#pragma once
// What the merge-on-evict methods carry between evictions, for the methods that read more than a
// head's rows: merge.method cam (merge_cam.h: each entry's attention accumulated over the decode
// steps, and the tokens appended since the layer's last eviction) and d2o (merge_on_evict.h,
// merge_on_evict_layer: each layer's EMA threshold). Owned by the EvictionEngine, which calls it
// at its reset, after every decode forward of a layer, at every compaction and at every
// decode-time eviction, asks it for the MergeContext of each head it evicts from, and lets it run
// the layer-level methods (merge_layer) before it compacts a layer's heads.
//
// The attention is kvpress CAMPress's running sum: reset at the prefill, then every decode
// forward adds its queries' attention probabilities (the decoder's column sums,
// LayerSignals::accumulated_attention) per query head, new entries starting at zero, kept
// aligned with the cache by `kept`. It is separate from the A_acc signal, which also sums the
// prompt's queries. Memory: one float per (query head, cache entry), as A_acc; nothing for the
// other methods.
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/merge_on_evict.h"
#include "core/engine/policy_program.h"

namespace kvevict {

class MergeOnEvictState {
 public:
  // Whether `merge` needs the decoder's attention column sums while decoding.
  static bool needs_decode_attention(const PolicyMerge& merge);
  // Whether `merge` merges a whole layer at once (merge_layer) instead of each head in keep.
  static bool merges_per_layer(const PolicyMerge& merge);

  // A new prompt: no decode attention, no appended tokens.
  void reset(const PolicyMerge& merge, int layers, int query_heads);
  // After a decode forward of layer s.layer (before any eviction of it): adds the forward's column
  // sums (std::logic_error when the decoder recorded none) and counts its tokens.
  void record_decode(const LayerSignals& s, const KVCache& cache);
  // Stored head `head` of `layer` (query heads head * group .. + group - 1) went from `length`
  // entries to `kept` (KVCache::keep's indices): its sums follow (a held vector of another
  // length is an engine bug: std::logic_error).
  void kept(int layer, int head, int group, std::span<const int> kept, size_t length);
  // `layer` was evicted at a decode trigger: its count of appended tokens restarts.
  void evicted(int layer);

  // The context of one eviction of stored head `head` holding T entries: `scores` (what the
  // selection ranked) and `positions` (original positions) as given, the attention as the mean of
  // the group's sums (zeros before the first decode forward), the layer's appended tokens.
  MergeContext context(int layer, int head, int group, int T, std::span<const float> scores, uint64_t seed,
                       std::span<const int32_t> positions) const;

  // A layer-level method's merge of one eviction of `layer` (kept[h]: stored head h's indices),
  // with the layer's state (merge_on_evict_layer; `rows` as there).
  MergeOnEvictCounts merge_layer(const PolicyMerge& merge, KVCache& cache, int layer,
                                 const std::vector<std::vector<int>>& kept, CachedRowMerges* rows = nullptr);

 private:
  bool active_ = false;
  std::vector<std::vector<std::vector<float>>> attention_;  // [layer][query head][cache entry]
  std::vector<int> appended_;                               // [layer]
  std::vector<D2oThreshold> d2o_;                           // [layer]
};

}  // namespace kvevict
