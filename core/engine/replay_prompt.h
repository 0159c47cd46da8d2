#pragma once
// What a policy's `observe.replay` turns into (docs/DSL.md §1): kvpress KVzipPress's replay prompt
// tokenised by the model's own tokenizer, the pass's options, and the pass itself run on a decoder
// that holds the prefilled context (core/engine/replay_pass.h). The one place that builds them, for
// prefill_prompt (block_prefill.h) and for a recorded prefill (PrefillRecorder::record_replay).
//
// Cost (docs/DSL.md §5): one extra forward pass over the context (chunk by chunk, each chunk with
// its prompt: about 1x the prefill's FLOPs, plus each replay query's attention over the sinks and
// its chunk), at most chunk + prompt tokens of extra K/V per (layer, KV head) at a time (dropped
// after each layer), and n_layers x n_heads x context floats of scores.
#include <span>

#include "core/decode/decoder.h"
#include "core/engine/policy_program.h"
#include "core/engine/replay_pass.h"

namespace kvevict {

// kvpress's texts (replay_pass.h) encoded without BOS; the suffix is the chat template's text after a
// user message (ChatML: "<|im_end|>\n<|im_start|>assistant\n", its special tokens parsed) or "\n"
// for a model without a chat template. Throws UsageError for a model without a tokenizer.
ReplayPrompt kvzip_replay_prompt(const Model& model);

// The pass's options for a policy's observe.replay; the whole context is replayed (context_start 0:
// kvevict's prompt is the context, there is no chat prefix outside it).
ReplayOptions replay_options(const PolicyObserve::Replay& settings);

// replay_scores(decoder, context, kvzip_replay_prompt(decoder.model()), replay_options(settings)).
// The replay's tokens take the positions after the context (context + the longest replay input, as
// in kvpress); a decoder error leaves the cache restored (replay_scores).
ReplayScores run_policy_replay(Decoder& decoder, std::span<const int> context, const PolicyObserve::Replay& settings);

}  // namespace kvevict
