#pragma once
// The window attention A of one (layer, KV head) scored by the query head of the same index
// (NACL's official code, spec §3.5 item 1; PolicyObserve::same_index_head). Also the seed of the
// random share for decode-time applications. Kept out of engine.cpp: it is policy-facing
// observation logic, not the engine's flow.
#include <cstdint>
#include <span>
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

// NACL's code_compat head map (PolicyObserve::same_index_head, spec §3.5 item 1): writes A for KV
// head `kv_head` of `layer` into `out`, shaped [1][W][T] with T = cache.length(layer, kv_head) in that
// head's cache order, from query head kv_head alone, attending (causally or not) over the entries
// of its own KV head kv_head / `group`, as the model's attention does; an entry of kv_head that the
// source head no longer holds gets 0. Returns 1, the group size the score program then sees.
// `keys` are kv_head's keys as the caller already holds them (dense, or reconstructed from a codebook).
// The ordinary map (the G query heads of the group) is compute_window_attention directly.
int observe_same_index_head(bool causal, const WindowQueries& queries, const KVCache& cache, int layer, int kv_head,
                            int group, const float* keys, std::vector<float>& out);

// The seed of the random share (NACL's sampling) for an eviction at decode step `step` (1-based;
// 0 = prefill, which uses `seed` itself). Each decode-time application draws afresh, as the paper's
// per-eviction sampling does, instead of reusing the prefill's draw for a surviving position:
// seed + step * 0x9E3779B97F4A7C15 (mod 2^64), i.e. a different Philox key per application.
uint64_t sampling_seed_for_step(uint64_t seed, int step);

}  // namespace kvevict

namespace kvevict {

// FinchPress's window (PolicyObserve::window_after_token): the number of prompt tokens after the
// last occurrence of `token_id` in `tokens` (the question after the context + delimiter), or -1
// when the token does not occur. The delimiter itself stays in the cache as an ordinary entry.
int window_after_token(std::span<const int> tokens, int token_id);

}  // namespace kvevict
