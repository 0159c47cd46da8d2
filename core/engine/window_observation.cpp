#include "core/engine/window_observation.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/engine/attention_signals.h"

namespace kvevict {

int observe_same_index_head(bool causal, const WindowQueries& queries, const KVCache& cache, int layer, int kv_head,
                            int group, const float* keys, std::vector<float>& out) {
  const int T = cache.length(layer, kv_head), W = queries.W, d = cache.head_dim();
  const int32_t* positions = cache.positions(layer, kv_head);
  // Query head j = kv_head belongs to KV head j / G and attends over that head's entries, as in
  // the model's own attention; group = 1 with kv_head = j selects exactly query head j.
  const int query_head = kv_head;
  if (query_head >= queries.n_heads)
    throw std::logic_error("same_index_head: KV head " + std::to_string(kv_head) + " has no query head of that index");
  const int source = query_head / group;
  const int Ts = cache.length(layer, source);
  const int32_t* source_positions = cache.positions(layer, source);
  std::vector<float> scratch;
  const float* source_keys = source == kv_head ? keys : cache.keys_or_reconstruct(layer, source, scratch);
  std::vector<float> a(static_cast<size_t>(W) * Ts);
  compute_window_attention(queries.rows, W, queries.n_heads, queries.position0, query_head, 1, source_keys,
                           source_positions, Ts, d, a.data(), causal);
  if (Ts == T && std::equal(positions, positions + T, source_positions)) {  // always so at prefill
    out.swap(a);
    return 1;
  }
  // The heads hold different entries (after a decode-time eviction): match by original position.
  std::unordered_map<int32_t, int> index;
  index.reserve(static_cast<size_t>(Ts));
  for (int s = 0; s < Ts; ++s) index.emplace(source_positions[s], s);
  out.assign(static_cast<size_t>(W) * T, 0.0f);
  for (int t = 0; t < T; ++t) {
    const auto it = index.find(positions[t]);
    if (it == index.end()) continue;
    for (int w = 0; w < W; ++w) out[static_cast<size_t>(w) * T + t] = a[static_cast<size_t>(w) * Ts + it->second];
  }
  return 1;
}

uint64_t sampling_seed_for_step(uint64_t seed, int step) {
  return seed + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
}

}  // namespace kvevict

namespace kvevict {

int window_after_token(std::span<const int> tokens, int token_id) {
  for (size_t i = tokens.size(); i-- > 0;)
    if (tokens[i] == token_id) return static_cast<int>(tokens.size() - 1 - i);
  return -1;
}

}  // namespace kvevict
