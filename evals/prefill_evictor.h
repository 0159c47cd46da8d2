#pragma once
// What the model runner needs from an eviction backend: record the signals of one full-cache
// prefill, then evict a restored copy of that cache for any (policy, budget). The production
// backend is the eviction engine with compiled policy files (evals/engine_evictor.cpp); tests may
// plug in a hand-written one.
#include <memory>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/budget.h"
#include "evals/config.h"

namespace kvevict::evals {

class PrefillEvictor {
 public:
  virtual ~PrefillEvictor() = default;
  // Loads and checks every policy once, before any sample; throws UsageError on a bad policy.
  virtual void prepare(const std::vector<PolicyChoice>& policies, const Model& model) = 0;
  // A fresh recorder for the next sample's prefill (covers every prepared policy's needs).
  virtual ForwardObserver* start_recording() = 0;
  // Evicts `cache` (the restored full-cache copy) for one (policy, budget). Returns the observer to
  // attach to later decode steps (null when the policy does nothing while decoding); it stays valid
  // until the next apply() or start_recording().
  virtual ForwardObserver* apply(const PolicyChoice& policy, const Budget& budget, KVCache& cache) = 0;
};

// The eviction engine with compiled policy files (evals/engine_evictor.cpp).
std::unique_ptr<PrefillEvictor> make_engine_evictor(uint64_t seed);

}  // namespace kvevict::evals
