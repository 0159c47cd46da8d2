#pragma once
// Causal grouped-query attention of a block of queries over one layer's ragged KV cache.
// The block's own K/V must already be appended: for query head h (KV head h / G) the cache holds
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
  int group = 1;                   // query heads per KV head
  float* out = nullptr;            // [n][n_heads * head_dim]
  // When non-null, receives [n_heads][len of the head's KV head]: per cache entry, the sum over the
  // block's queries of the attention probability it received.
  std::vector<std::vector<float>>* column_sums = nullptr;
};

void block_attention(const KVCache& cache, const BlockAttentionArgs& args);

}  // namespace kvevict
