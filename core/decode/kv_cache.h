#pragma once
// The KV cache, built for eviction: each (layer, KV head) is its own ragged sequence of entries,
// stored contiguously ([len][head_dim] keys post-RoPE, [len][head_dim] values, original positions).
// Eviction compacts physically (`keep`): survivors move to the front, the length shrinks and the
// freed tail is reused by later appends (or released with `shrink_to_fit`). Masking is not eviction.
// Keys before RoPE are recovered exactly by rotating back with the entry's original position.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/model/model_config.h"

namespace kvevict {

class KVCache {
 public:
  KVCache() = default;
  explicit KVCache(const ModelConfig& config);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }
  int head_dim() const { return head_dim_; }

  int length(int layer, int kv_head) const { return static_cast<int>(head(layer, kv_head).positions.size()); }
  int64_t total_entries() const;  // sum of lengths over all (layer, KV head)

  const float* keys(int layer, int kv_head) const { return head(layer, kv_head).keys.data(); }      // post-RoPE
  const float* values(int layer, int kv_head) const { return head(layer, kv_head).values.data(); }
  const int32_t* positions(int layer, int kv_head) const { return head(layer, kv_head).positions.data(); }
  float* mutable_keys(int layer, int kv_head) { return head(layer, kv_head).keys.data(); }
  float* mutable_values(int layer, int kv_head) { return head(layer, kv_head).values.data(); }
  // Keys of every entry with RoPE undone, [len][head_dim].
  std::vector<float> keys_pre_rope(int layer, int kv_head) const;

  // Appends one entry. `key` is post-RoPE.
  void append(int layer, int kv_head, int32_t position, const float* key, const float* value);

  // Keeps exactly the entries at `indices` (cache order, each in [0, length), no duplicates), in the
  // order given, moving them to the front in place. Throws std::invalid_argument on a bad index.
  void keep(int layer, int kv_head, std::span<const int> indices);

  // Bytes held by live entries: 2 * len * head_dim * sizeof(float) + len * sizeof(int32_t), summed.
  size_t bytes_in_use() const;
  // Bytes reserved by the containers (>= bytes_in_use).
  size_t bytes_reserved() const;
  // Bytes a cache holding `tokens` entries in every (layer, KV head) would use.
  size_t bytes_for_uniform_length(int64_t tokens) const;
  void shrink_to_fit();
  void clear();

 private:
  struct Head {
    std::vector<float> keys;
    std::vector<float> values;
    std::vector<int32_t> positions;
  };
  const Head& head(int layer, int kv_head) const { return heads_[static_cast<size_t>(layer) * n_kv_heads_ + kv_head]; }
  Head& head(int layer, int kv_head) { return heads_[static_cast<size_t>(layer) * n_kv_heads_ + kv_head]; }

  ModelConfig config_;
  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  std::vector<Head> heads_;
};

}  // namespace kvevict
