#pragma once
// A hook on KVCache's mutations, for components that keep a copy of the cache elsewhere (the
// device mirror, core/decode/device_kv_mirror.h): the eviction engine mutates the host cache
// through KVCache's public operations, and a copy kept by the decoder alone would go stale.
//
// Contract. KVCache calls the attached listener AFTER each mutation of its contents has
// succeeded (a refused operation throws before any call), with the arguments of the operation;
// reading the cache from inside a call sees the new state. Head indices are stored heads, as in
// KVCache's per-head accessors. At most one listener per cache; KVCache does not own it, and the
// listener must outlive its attachment (detach with set_listener(nullptr)). With no listener
// attached every mutation costs one null test.
//
// Copies. Copy- or move-constructing a KVCache never carries the listener (a snapshot is not
// watched). Copy- or move-assigning INTO a cache that has a listener keeps that listener attached
// to the target and calls on_replaced() once the contents were assigned.
//
// Not reported: writes through mutable_keys()/mutable_values() (raw pointers into an F32 cache;
// the engine does not use them) and shrink_to_fit() (capacity only, no contents change).
#include <cstdint>
#include <span>

namespace kvevict {

class KvCacheListener {
 public:
  // on_codebook's head for set_layer_codebook: every stored head of the layer changed.
  static constexpr int kAllHeads = -1;

  virtual ~KvCacheListener() = default;
  // One entry appended to stored head `head` (KVCache::append calls it once per stored head that
  // copies the KV head). key/value are the f32 rows given to append (a codebook head stores them
  // approximated: read the cache for what it holds).
  virtual void on_append(int layer, int head, int32_t position, const float* key, const float* value) = 0;
  // KVCache::keep(layer, head, indices): the head now holds old entries indices[0], indices[1], ...
  virtual void on_keep(int layer, int head, std::span<const int> indices) = 0;
  // Entry t of the head was overwritten (write_entry: merges, channel zeroing).
  virtual void on_write_entry(int layer, int head, int t) = 0;
  // The head's positions were re-assigned and its moved keys re-rotated (reassign_positions).
  virtual void on_reassign(int layer, int head) = 0;
  // The head (or every head of the layer: kAllHeads) became codebook-backed; its rows are now
  // reconstructions, not the stored ones.
  virtual void on_codebook(int layer, int head) = 0;
  // The cache switched to one stored head per query head (unfold / unfold_keep).
  virtual void on_unfold() = 0;
  // Every head emptied and folded (clear).
  virtual void on_clear() = 0;
  // Everything may have changed: the cache was assigned another cache's contents.
  virtual void on_replaced() = 0;
};

}  // namespace kvevict
