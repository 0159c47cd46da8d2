#pragma once
// Random selection cases shared by the device-selection CPU test (twin vs the CPU engine) and GPU
// test (kernels vs twin): heavy ties, NaN / +-inf / +-0 scores, positions that are cache indices,
// ascending with gaps, or shuffled (a score-ordered cache), and specs covering budgets 0, 1, below
// the protected count, = length, > length, overlapping protection, random shares and both orders.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "core/engine/selection.h"

namespace kvevict::devsel_test {

struct HeadCase {
  std::vector<float> scores;
  std::vector<int32_t> positions;
  HeadSelectionSpec spec;
};

inline std::vector<float> random_scores(std::mt19937& rng, int n) {
  std::vector<float> s(static_cast<size_t>(n));
  const int style = static_cast<int>(rng() % 4);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::normal_distribution<float> normal;
  const int distinct = 3 + static_cast<int>(rng() % 3);  // heavy ties: 3-5 values
  for (float& x : s) {
    if (style == 0) x = normal(rng);
    else x = static_cast<float>(rng() % distinct) * 0.5f - 1.0f;
  }
  if (style >= 2) {  // specials: NaN (both signs), +-inf, +-0
    const float special[] = {nan, -nan, inf, -inf, 0.0f, -0.0f};
    for (int i = 0; i < n / 8 + 1 && n > 0; ++i) s[rng() % n] = special[rng() % 6];
  }
  return s;
}

inline std::vector<int32_t> random_positions(std::mt19937& rng, int n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  const int style = static_cast<int>(rng() % 4);
  std::iota(p.begin(), p.end(), 0);  // style 0: re-assigned positions (cache indices)
  if (style >= 1) {                  // ascending with gaps, from an offset: a compacted cache
    int32_t at = static_cast<int32_t>(rng() % 50);
    for (int32_t& x : p) x = (at += 1 + static_cast<int32_t>(rng() % 7));
  }
  if (style == 3) std::shuffle(p.begin(), p.end(), rng);  // compacted in score order
  return p;
}

inline HeadSelectionSpec random_spec(std::mt19937& rng, int n, int head) {
  HeadSelectionSpec spec;
  const int protect_choices[] = {0, 0, 1, 4, 16, n / 2 + 1};
  spec.protect_first = protect_choices[rng() % 6];
  spec.protect_recent = protect_choices[rng() % 6];
  const int prot = std::min(n, spec.protect_first + spec.protect_recent);
  const int budget_choices[] = {0, 1, std::max(0, prot - 1), prot, n, n + 5, n * 3 / 100, static_cast<int>(rng() % (n + 1))};
  spec.budget = budget_choices[rng() % 8];
  const double shares[] = {0.0, 0.0, 0.25, 0.5, 1.0};
  spec.random_share = shares[rng() % 5];
  const double temps[] = {0.5, 1.0, 2.0};
  spec.temperature = temps[rng() % 3];
  spec.score_order = rng() % 2;
  spec.seed = rng();
  spec.layer = static_cast<int>(rng() % 4);
  spec.kv_head = head;
  return spec;
}

inline HeadCase random_head(std::mt19937& rng, int n, int head) {
  HeadCase c;
  c.scores = random_scores(rng, n);
  // Positions come before the scores' protected counts matter: sinks are positions < protect_first.
  c.positions = random_positions(rng, n);
  c.spec = random_spec(rng, n, head);
  return c;
}

inline int random_length(std::mt19937& rng, int i) {
  if (i % 40 == 39) return 20000 + static_cast<int>(rng() % 80001);  // up to 100K
  const int small[] = {0, 1, 2, 3, 7, 31};
  if (i % 5 == 0) return small[rng() % 6];
  return 1 + static_cast<int>(rng() % 3000);
}

template <class T>
std::vector<std::span<const T>> spans(const std::vector<std::vector<T>>& rows) {
  return std::vector<std::span<const T>>(rows.begin(), rows.end());
}

}  // namespace kvevict::devsel_test
