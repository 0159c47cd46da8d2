#pragma once
// The window attention A of one (layer, KV head) as a policy's `observe` settings ask for it
// (PolicyObserve): causal or not, and scored by the query heads of the KV head's group or by the
// query head of the same index (NACL's official code, spec §3.5 item 1). Also the seed of the
// random share for decode-time applications. Kept out of engine.cpp: it is policy-facing
// observation logic, not the engine's flow.
#include <cstdint>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/engine/policy_program.h"

namespace kvevict {

// The newest query rows the engine holds for a layer.
struct WindowQueries {
  const float* rows = nullptr;  // [W][n_heads][head_dim], post-RoPE
  int W = 0;
  int n_heads = 0;
  int position0 = 0;  // original position of the first row (rows are contiguous)
};

// Writes A for KV head `kv_head` of `layer` into `out`, shaped [heads][W][T] with T =
// cache.length(layer, kv_head) in that head's cache order, and returns `heads`: `group` (the G
// query heads kv_head*G .. kv_head*G+G-1), or 1 with observe.same_index_head (query head kv_head,
// attending over the entries of its own KV head kv_head / G; an entry of kv_head that the source
// head no longer holds gets 0). Softmax over the source head's entries, as the model's attention.
// `keys` are kv_head's keys as the caller already holds them (dense, or reconstructed from a codebook).
int observe_window_attention(const PolicyObserve& observe, const WindowQueries& queries, const KVCache& cache,
                             int layer, int kv_head, int group, const float* keys, std::vector<float>& out);

// The seed of the random share (NACL's sampling) for an eviction at decode step `step` (1-based;
// 0 = prefill, which uses `seed` itself). Each decode-time application draws afresh, as the paper's
// per-eviction sampling does, instead of reusing the prefill's draw for a surviving position:
// seed + step * 0x9E3779B97F4A7C15 (mod 2^64), i.e. a different Philox key per application.
uint64_t sampling_seed_for_step(uint64_t seed, int step);

}  // namespace kvevict
