#pragma once
// The one way a prompt enters the decoder under a policy: in one forward call, or, when the policy
// sets run.prefill_block = N > 0, in blocks of N tokens with the policy applied after every block
// (a chunked prefill: BlockPress, KeyDiff's block prompt processing). Each block attends over the
// cache as the previous blocks left it, so no head ever holds more than its budget + N entries and
// the prefill's peak cache is bounded by the budget, not by the prompt. A policy that reads A_replay
// (KVzip, never in blocks) is scored after the prompt's forward call: prefill_prompt then runs the
// context replay on the full cache and the engine evicts (EvictionEngine::finish_replay).
#include <span>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"

namespace kvevict {

// Prefills `tokens` (the whole prompt, into an empty cache) into `decoder`. `engine` (may be null:
// no policy) is told the prompt first (EvictionEngine::announce_prompt: its window is then known
// before the first call, also one found from the prompt's length or tokens) and decides the block
// size from its policy; `observer` is what the decoder calls (the
// engine itself, a wrapper around it, or a recorder). Returns the logits of the prompt's last token (the
// decoder's buffer, or the engine's copy of it after a replay).
const std::vector<float>& prefill_prompt(Decoder& decoder, std::span<const int> tokens, EvictionEngine* engine,
                                         ForwardObserver* observer);

}  // namespace kvevict
