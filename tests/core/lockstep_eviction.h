#pragma once
// Two decoders under the same policy, fed the same tokens in lockstep (A's greedy ids), compared
// after the prompt and after every decode step: the logits within `bound` while their caches are
// the same, and their caches (kept sets and slot orders) until the first divergence, which must be
// made of near ties only (core/engine/kept_set_comparison.h says why, and why comparing stops
// there). Shared by the CPU/GPU agreement tests and their CPU proof (f16 vs f32 caches).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/engine/kept_set_comparison.h"

namespace kvevict::test {

struct LockstepOutcome {
  int same_cache_steps = 0;  // calls compared on identical caches (the prompt counts as one)
  KeptSetFork fork;
};

// Engines must trace selections on A (EngineOptions::trace_selection) for the classification.
// `observer_b`: B's observer when it wraps eb (eb itself by default).
inline ::testing::AssertionResult eviction_in_lockstep(Decoder& a, EvictionEngine& ea, Decoder& b, EvictionEngine& eb,
                                                       const std::vector<int>& prompt, int steps,
                                                       const std::function<float(const std::vector<float>&)>& bound,
                                                       LockstepOutcome* outcome = nullptr,
                                                       ForwardObserver* observer_b = nullptr) {
  LockstepOutcome local;
  LockstepOutcome& out = outcome ? *outcome : local;
  ForwardObserver* observer = observer_b ? observer_b : &eb;
  std::vector<float> la = a.forward(prompt, &ea), lb = b.forward(prompt, observer);
  for (int s = 0;; ++s) {
    float diff = 0;
    for (size_t i = 0; i < la.size() && i < lb.size(); ++i) diff = std::max(diff, std::abs(la[i] - lb[i]));
    // These logits were computed on identical caches: a layer's eviction runs after its attention.
    if (diff > bound(la))
      return ::testing::AssertionFailure() << "step " << s << ": max |dlogit| " << diff << " > " << bound(la);
    ++out.same_cache_steps;
    const CacheOrder oa = cache_order(a.cache()), ob = cache_order(b.cache());
    if (!out.fork.observe(s, ea.report(), eb.report(), &oa, &ob)) {
      if (!out.fork.at_fork().only_near_ties())
        return ::testing::AssertionFailure() << "the caches part on more than near ties at " << out.fork.describe();
      return ::testing::AssertionSuccess() << "parted on near ties at " << out.fork.describe();
    }
    if (s == steps) return ::testing::AssertionSuccess() << "same caches for all " << steps << " steps";
    const int next = static_cast<int>(std::max_element(la.begin(), la.end()) - la.begin());
    la = a.forward(std::vector<int>{next}, &ea);
    lb = b.forward(std::vector<int>{next}, observer);
  }
}

}  // namespace kvevict::test
