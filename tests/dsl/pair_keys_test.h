#pragma once
// Shared by the token-pair suites (pairwise_axes_test.cpp, pair_shortcuts_test.cpp): random keys
// with some near-parallel pairs, and a score program evaluated on them as one KV head.
#include <cstdint>
#include <random>
#include <vector>

#include "dsl/interpreter.h"

namespace kvevict::dsl::test {

// Keys [d][t] of T tokens and D channels, random but fixed; every third token is made close to
// the one before it, so that thresholds on the cosine see both sides.
struct Keys {
  int T, D;
  std::vector<float> k;  // [d][t]
  double at(int d, int t) const { return k[size_t(d) * size_t(T) + size_t(t)]; }
};

inline Keys random_keys(int T, int D, uint32_t seed) {
  Keys keys{T, D, std::vector<float>(size_t(T) * size_t(D))};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto& v : keys.k) v = n(rng);
  for (int t = 1; t < T; t += 3)  // token t close to token t - 1
    for (int d = 0; d < D; ++d) keys.k[size_t(d) * T + t] = keys.k[size_t(d) * T + t - 1] + 0.3f * n(rng);
  return keys;
}

// The program's score over the keys (one query head, no window rows).
inline std::vector<float> run_on_keys(const LoweredProgram& p, const Keys& keys) {
  EvalInputs in;
  in.ext = {.g = 1, .h = 1, .q = 0, .d = keys.D, .t = keys.T};
  in.scalars[static_cast<int>(ScalarSignal::T)] = float(keys.T);
  HeadSignals h;
  h.tensors[signal_index(TensorSignal::Keys)] = keys.k.data();
  in.heads.push_back(h);
  std::vector<float> out(size_t(keys.T));
  evaluate_scores(p, in, out.data());
  return out;
}

}  // namespace kvevict::dsl::test
