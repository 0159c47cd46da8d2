#pragma once
// Causal grouped-query attention of a block of queries over one layer's ragged KV cache.
// Heads are the cache's stored heads (KVCache::n_stored_heads): query head h reads stored head
// h / group, with group = n_heads / stored heads (G, or 1 for an unfolded cache).
// The block's own K/V must already be appended: for query head h (stored head h / group) the cache holds
// len entries, the last n of which belong to the block, and block query i attends to entries
// [0, len - n + i]. Scores exist only for one tile of queries x one block of keys at a time.
#include <vector>

#include "core/decode/kv_cache.h"

namespace kvevict {

struct BlockAttentionArgs {
  int layer = 0;
  const float* queries = nullptr;  // [n][n_heads * head_dim], post-RoPE
  int n = 0;
  int n_heads = 0;
  int group = 1;                   // query heads per stored head (G; 1 when the cache is unfolded)
  float* out = nullptr;            // [n][n_heads * head_dim]
  // When non-null, receives [n_heads][len of the head's stored head]: per cache entry, the sum over the
  // block's queries of the attention probability it received.
  std::vector<std::vector<float>>* column_sums = nullptr;
};

void block_attention(const KVCache& cache, const BlockAttentionArgs& args);

}  // namespace kvevict
