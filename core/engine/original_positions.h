#pragma once
// Original positions of a cache whose positions the engine re-assigns (PolicyRun::reassign_positions,
// StreamingLLM's official mode). Once re-assigned, the cache's own positions are cache indices
// (what RoPE and the decoder use), so the engine keeps each entry's index in the sequence here,
// aligned with cache order through every append and compaction. Scores (`pos[t]`), the protected
// sinks, the tie rule, causal window attention and the report's kept_positions read these, so a
// policy sees the same positions in both modes.
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/kv_cache.h"

namespace kvevict {

class OriginalPositions {
 public:
  bool active() const { return active_; }
  void clear();
  // Copies the cache's current (still original) positions and re-assigns every head of the cache.
  void start_and_reassign(KVCache& cache);
  // The decoder appended the entries of a block whose first token has sequence index
  // `first_position`: records their original positions for every head of `layer`.
  void appended(int layer, const KVCache& cache, int first_position);
  // Mirrors KVCache::keep on the same head.
  void kept(int layer, int kv_head, std::span<const int> indices);
  // Re-assigns every head of `layer` (after an eviction of that layer).
  static void reassign_layer(KVCache& cache, int layer);
  const int32_t* of(int layer, int kv_head) const { return positions_[layer][kv_head].data(); }

 private:
  bool active_ = false;
  std::vector<std::vector<std::vector<int32_t>>> positions_;  // [layer][kv_head][cache entry]
};

}  // namespace kvevict
