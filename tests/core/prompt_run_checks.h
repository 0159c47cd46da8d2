#pragma once
// Runs of one prompt that the engine tests compare (stories260K, a CPU decoder of one thread):
//   * live_prompt_layout: the prompt as generate runs it (announced, prefilled through the engine);
//   * later_prompt_layout: the same prompt sent again after one decode step without being announced
//     (a bare forward from position 0, which the engine takes for a decode call until it arrives),
//     with the engine's request just before it;
//   * record_sweep: an eval sweep's recorded full-cache prefill (evals' PrefillEvictor), and
//     expect_applied_like_live: each of its policies applied from it (restore and apply) keeps the
//     caches of its live run.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "evals/config.h"
#include "evals/prefill_evictor.h"
#include "window_attention_injection.h"

namespace kvevict::test {

inline CacheLayout live_prompt_layout(const Model& model, const PolicyProgram& policy, std::span<const int> tokens,
                                      const Budget& budget, uint64_t seed = 3) {
  auto decoder = make_cpu_decoder(model, {.threads = 1});
  EvictionEngine engine(policy, model.config, EngineOptions{budget, seed});
  prefill_prompt(*decoder, tokens, &engine, &engine);
  return cache_layout_of(decoder->cache());
}

struct LaterPrompt {
  ObservationRequest asked;  // the engine's request after the decode step, before the later prompt
  CacheLayout layout;        // the cache after the later prompt
};

inline LaterPrompt later_prompt_layout(const Model& model, const PolicyProgram& policy, std::span<const int> tokens,
                                       const Budget& budget, uint64_t seed = 3) {
  auto decoder = make_cpu_decoder(model, {.threads = 1});
  EvictionEngine engine(policy, model.config, EngineOptions{budget, seed});
  prefill_prompt(*decoder, tokens, &engine, &engine);
  const int next = 5;
  decoder->forward(std::span<const int>(&next, 1), &engine);
  LaterPrompt out;
  out.asked = engine.request();
  decoder->reset();
  decoder->forward(tokens, &engine);
  out.layout = cache_layout_of(decoder->cache());
  return out;
}

// One eval sweep's recorded full-cache prefill of `tokens` (the PrefillEvictor of evals, seed 3).
struct RecordedSweep {
  std::unique_ptr<evals::PrefillEvictor> evictor;
  std::unique_ptr<Decoder> decoder;          // holds the recording's full-cache prefill
  ObservationRequest asked;                  // what the recorder asked of the decoder for the call
  const PrefillRecorder* recorder = nullptr;
};

inline RecordedSweep record_sweep(const Model& model, const std::vector<evals::PolicyChoice>& choices,
                                  std::span<const int> tokens) {
  RecordedSweep r;
  r.evictor = evals::make_engine_evictor(3);
  r.evictor->prepare(choices, model);
  r.decoder = make_cpu_decoder(model, {.threads = 1});
  ForwardObserver* recording = r.evictor->start_recording(static_cast<int>(tokens.size()));
  r.asked = recording->request();
  r.decoder->forward(tokens, recording);
  r.recorder = dynamic_cast<const PrefillRecorder*>(recording);
  return r;
}

// Each of `choices` applied from the recording keeps the caches of its live run.
inline void expect_applied_like_live(RecordedSweep& sweep, const std::vector<evals::PolicyChoice>& choices,
                                     const Model& model, std::span<const int> tokens, const Budget& budget) {
  const std::unique_ptr<DecoderSnapshot> full = sweep.decoder->snapshot();
  for (const evals::PolicyChoice& c : choices) {
    sweep.decoder->restore(*full);
    sweep.evictor->apply(c, budget, sweep.decoder->cache());
    const auto policy = load_policy(c.policy, c.params);
    EXPECT_EQ(cache_layout_of(sweep.decoder->cache()), live_prompt_layout(model, *policy, tokens, budget)) << c.label;
  }
}

}  // namespace kvevict::test
