#pragma once
// KVzip's context-reconstruction scores (arXiv 2505.23416; kvpress KVzipPress): after the context
// prefill, a second forward pass feeds, per context chunk, a "repeat the previous context" prompt,
// the chat suffix and the chunk itself against the cache. Each context entry's score is the largest
// attention any replay query of its KV head's group gives it, with the softmax taken over the sinks,
// the chunk and the replay tokens only (causal among the replay tokens), not over the whole cache.
// The replay's own K/V are dropped again after each layer, so the cache ends exactly as it was.
// The attention itself is the decoder's to make (ObservationRequest::replay_attention,
// core/decode/replay_attention_block.h): the pass reads no cached row and no query row, so on a
// device-resident cache nothing of the cache comes to the host.
//
// This file is the mechanism only (the scores, in cache order); tokenising the prompt texts is the
// caller's job, so the pass does not depend on a tokenizer or a chat template.
// A policy reaches it through `observe.replay` and the signal A_replay (docs/DSL.md §1, §5):
// replay_prompt.h tokenises the prompt and runs the pass after the prefill (prefill_prompt, or a
// PrefillRecorder once per recorded prefill), and the engine reads the scores by original position.
#include <span>
#include <vector>

#include "core/decode/decoder.h"

namespace kvevict {

// The token ids a replay feeds before each chunk. kvpress's texts: `first` = "\n\nRepeat the previous
// context exactly.", `later` = "\n\nRepeat the part of the previous context exactly, starting with",
// `suffix` = the chat template's text after a user turn (the assistant header), or "\n" for a model
// without a chat template (kvpress's default).
struct ReplayPrompt {
  std::vector<int> first;
  std::vector<int> later;
  std::vector<int> suffix;
};

struct ReplayOptions {
  int chunk = 2048;          // context tokens replayed per forward pass (kvpress: 2048)
  int previous_tail = 8;     // a later chunk's prompt quotes the previous chunk's last tokens (kvpress: 8)
  int n_sink = 4;            // leading entries every chunk's softmax also covers, and scored 1 (kvpress: 4)
  int context_start = 0;     // kvpress's prefix_length: the chat template's prefix is not replayed
  // KVzip+ (kvpress kvzip_plus_normalization), its row factor: each replay query's probabilities
  // divided by the L2 norm of its attention input (the layer input after its RMSNorm, what the
  // projections read). The column factor ||W_o,h v_t|| is a per-entry signal (out_norm) that a
  // caller multiplies in before taking the max over the group.
  bool hidden_normalised = false;
  bool operator==(const ReplayOptions&) const = default;
};

// Bounds on ReplayOptions (validated by replay_scores): a replay forward holds at most
// kMaxReplayChunk + prompt tokens of extra K/V per head.
constexpr int kMaxReplayChunk = 1 << 16;
constexpr int kMaxReplayPromptTokens = 4096;

// scores[(layer * n_heads + q_head) * length + t] for the cache's entry t (t = position): query
// head q_head's score of the entry of its KV head q_head / (n_heads / n_kv_heads).
struct ReplayScores {
  int n_layers = 0;
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;
  int length = 0;
  std::vector<float> scores;
  float at(int layer, int q_head, int t) const {
    return scores[(static_cast<size_t>(layer) * n_heads + q_head) * length + t];
  }
  // kvpress's score of (layer, kv_head, t): the max over the KV head's query heads.
  float group_max(int layer, int kv_head, int t) const;
};

// Runs the replay on `decoder`, whose cache must hold exactly the prefilled `context` (every head
// of length context.size() == decoder.position(), folded, nothing evicted: cache index = position).
// Initialisation as kvpress: 0 everywhere, 1 on the first n_sink entries; each chunk [start, end)
// of [context_start, S) then overwrites its entries with its max attention (so with
// context_start = 0 the first chunk overwrites the sinks too, as kvpress does). The sinks of a
// chunk's softmax are the first min(n_sink, start) entries. Afterwards the cache and
// decoder.position() are as before (entries, positions and bytes). Throws std::invalid_argument on
// a cache that does not hold the context as described, or options out of their bounds.
ReplayScores replay_scores(Decoder& decoder, std::span<const int> context, const ReplayPrompt& prompt,
                           const ReplayOptions& options = {});

// The replay input of chunk `index` of the chunks [context_start, S) (kvpress's prepare):
// prompt (first or later + the previous chunk's last previous_tail tokens) + suffix + chunk.
std::vector<int> replay_tokens(std::span<const int> context, const ReplayPrompt& prompt, const ReplayOptions& options,
                               int index);

// Number of chunks the context splits into (0 when no token lies after context_start).
int replay_chunk_count(int context_length, const ReplayOptions& options);

}  // namespace kvevict
