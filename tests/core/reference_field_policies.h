#pragma once
// Independent references for the policies of policies/field/ (docs/POLICIES.md), written from each
// method's formula and its reference code's rule as the file's `about` comment cites them, in
// double, from raw recorded signals (queries, keys, values, positions), NOT from the DSL or the
// engine's selection code. Ties: higher score first, then smaller original position (the engine's
// documented rule, which the reference codes leave to torch.topk).
#include <cstdint>
#include <vector>

#include "reference_policies.h"

namespace kvevict::reference {

// ---- Prefill-only methods, on the full-prompt signals of reference::collect -------------------

KeptSets observed_attention(const PromptData& p, int budget);  // kvpress ObservedAttentionPress
// kvpress KeyDiffPress: -cos(k_t, mean over t of k_t / |k_t|), post-RoPE keys, `sinks` first kept.
KeptSets keydiff(const PromptData& p, int budget, int sinks);

struct CurParams {
  int sinks = 4, block = 16;
  enum class Leverage { KvProduct, Key, Value, KvAvg } leverage = Leverage::KvProduct;
  bool local = true;
};
KeptSets cur(const PromptData& p, int budget, const CurParams& cp);  // kvpress CURPress

// kvpress PR 206's compute_adaptive_ratio per layer, as 1 - ratio (the share a layer keeps).
std::vector<double> entropy_adaptive_keep_shares(const PromptData& p, double min_ratio, double max_ratio);
// The layers split budget x L tokens per KV head in proportion to the shares (largest remainder,
// capped at the prompt: cake_budgets with no window), then ObservedAttention top-k per head.
KeptSets entropy_adaptive(const PromptData& p, int budget, double min_ratio, double max_ratio);

// ---- Methods that also evict while decoding: one decision on one (layer, KV head) -------------

// What a head holds when the engine decides (recorded before it acts).
struct CachedHead {
  int T = 0;
  std::vector<float> keys;    // [T][d] post-RoPE, cache order
  std::vector<int32_t> pos;   // original positions, cache order
};
// One query token: its position and its post-RoPE queries of every query head, [n_heads][d].
struct QueryRow {
  int pos = 0;
  std::vector<float> q;
};

// Softmax attention in double of query head `qh` of each row over the cached entries it may see
// (original position <= the row's): [rows][T], 0 where not visible.
std::vector<std::vector<double>> attention(const CachedHead& c, const std::vector<QueryRow>& rows, int qh, int d);

// MorphKV (ghadiaravi13/MorphKV morphkv_mask): the last `window` rows score the entries older than
// the newest `window` entries by softmax over those entries of the group's summed logits, summed
// (or maxed) over the rows; the top budget - window are kept with the window.
std::vector<int32_t> morphkv_keep(const CachedHead& c, const std::vector<QueryRow>& rows, int kv_head, int G, int d,
                                  int budget, int window, bool max_over_rows);

// Scissorhands (KVCache-Factory scissorhands.py, top-k): importance = attention summed over the
// last `window` rows, group mean (or max); `sinks` first positions and `recent` newest entries kept.
std::vector<int32_t> scissorhands_keep(const CachedHead& c, const std::vector<QueryRow>& rows, int kv_head, int G,
                                       int d, int budget, int window, int sinks, int recent, bool max_over_group);

// The inner presses of DecodingPress: KnormPress (lowest |k| kept) and StreamingLLMPress (sinks +
// newest).
std::vector<int32_t> knorm_keep(const CachedHead& c, int d, int budget);
std::vector<int32_t> streaming_keep(const CachedHead& c, int budget, int sinks);

}  // namespace kvevict::reference
