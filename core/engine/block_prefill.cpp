// prefill_prompt; see block_prefill.h.
#include "core/engine/block_prefill.h"

#include <algorithm>

namespace kvevict {

const std::vector<float>& prefill_prompt(Decoder& decoder, std::span<const int> tokens, EvictionEngine* engine,
                                         ForwardObserver* observer) {
  const int block = engine ? engine->prefill_block() : 0;
  const int n = static_cast<int>(tokens.size());
  if (engine) engine->announce_prompt(tokens);
  // A decoder that throws before the prompt's first layer reached the engine leaves the
  // announcement unconsumed, one that throws between blocks a prefill in blocks unfinished: both are
  // forgotten, so no later call takes them for its own (the last block's call ended the prefill
  // already when the prompt completed).
  struct Withdraw {
    EvictionEngine* engine;
    ~Withdraw() {
      if (!engine) return;
      engine->withdraw_announcement();
      engine->abandon_block_prefill();
    }
  } withdraw{engine};
  if (block <= 0 || n <= block) {
    const std::vector<float>& logits = decoder.forward(tokens, observer);
    // KVzip: the engine scores once the replay has run on the full cache (engine.h, finish_replay).
    if (engine && engine->awaits_replay()) return engine->finish_replay(decoder, tokens, logits);
    return logits;
  }
  engine->begin_block_prefill(n);
  const std::vector<float>* logits = nullptr;
  for (int start = 0; start < n; start += block) {
    const int length = std::min(block, n - start);
    logits = &decoder.forward(tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(length)), observer);
  }
  return *logits;
}

}  // namespace kvevict
