#pragma once
// What the model runner needs from an eviction backend: record the signals of one full-cache
// prefill, then evict a restored copy of that cache for any (policy, budget). The production
// backend is the eviction engine with compiled policy files (evals/engine_evictor.cpp); tests may
// plug in a hand-written one.
#include <memory>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/budget.h"
#include "core/engine/engine.h"
#include "evals/config.h"
#include "evals/stored_content.h"
#include "jit/scoring_backend.h"

namespace kvevict::evals {

class PrefillEvictor {
 public:
  virtual ~PrefillEvictor() = default;
  // Loads and checks every policy once, before any sample; throws UsageError on a bad policy.
  virtual void prepare(const std::vector<PolicyChoice>& policies, const Model& model) = 0;
  // A fresh recorder for the next sample's prefill of `prompt_len` tokens (covers every prepared
  // policy's needs at that length: some windows depend on the prompt length, e.g. NACL's proxy share).
  virtual ForwardObserver* start_recording(int prompt_len) = 0;
  // Called once right after the recording forward, while `decoder` still holds the full prompt: an
  // evictor whose policies need a second pass over the full cache (KVzip's replay, A_replay) runs it
  // here, once per sample, and keeps what it needs for every apply(). The cache ends as it was.
  virtual void after_recording(Decoder& decoder) { (void)decoder; }
  // Evicts `cache` (the restored full-cache copy) for one (policy, budget). Returns the observer to
  // attach to later decode steps (null when the policy does nothing while decoding); it stays valid
  // until the next apply() or start_recording().
  virtual ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) = 0;
  // The record of a prepared policy that the results store keeps (exact text, resolved parameters,
  // hash). The default, for an evictor that reads no policy file (hand-written ones in tests): no
  // text, the overrides as written.
  virtual PolicySource source(const PolicyChoice& choice) const {
    return make_policy_source(choice, "", params_json_as_written(choice));
  }
  // What the latest apply() kept per layer and head (kvevict replay prints it); null when this
  // evictor does not report, or before any apply() since start_recording().
  virtual const EvictionReport* report() const { return nullptr; }
  // Whether `policy` prefills the prompt itself (run.prefill_block: a prefill in blocks with the
  // policy applied after each block): then no shared full-cache prefill can stand in for it.
  virtual bool prefills_itself(const PolicyChoice& policy) const {
    (void)policy;
    return false;
  }
  // For such a policy: prefills `prompt` into `decoder` (reset, empty) under a fresh engine for
  // `budget`; `logits` receives the prompt's last logits. Returns the observer for decode steps
  // (null when the policy does nothing while decoding).
  virtual ForwardObserver* prefill_and_apply(const PolicyChoice& policy, const Budget& budget, Decoder& decoder,
                                             std::span<const int> prompt, std::vector<float>& logits) {
    (void)policy, (void)budget, (void)decoder, (void)prompt, (void)logits;
    throw std::logic_error("this evictor does not prefill by itself");
  }
  // The scoring backend's name (jit/scoring_backend.h); "" for an evictor that runs no policy file.
  virtual std::string scoring() const { return ""; }
};

// The eviction engine with compiled policy files (evals/engine_evictor.cpp), scored by `backend`
// (`device`: where the decoder runs; its GPU scores with ScoringBackend::CudaKernel).
std::unique_ptr<PrefillEvictor> make_engine_evictor(uint64_t seed,
                                                    jit::ScoringBackend backend = jit::ScoringBackend::Interpreter,
                                                    jit::DeviceChoice device = {});

}  // namespace kvevict::evals
