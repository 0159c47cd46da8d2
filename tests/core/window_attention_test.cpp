// compute_window_attention (BLAS products + vectorised softmax) against a scalar double-precision
// softmax written from its contract: causal by original positions, invisible entries exactly 0,
// rows of queries that see nothing all 0. Positions in ascending order (after prefill) and in any
// order (score-ordered selection), odd sizes that exercise the vector tails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/engine/attention_signals.h"

namespace kvevict {
namespace {

struct Case {
  int W, n_heads, group, T, d;
  bool shuffled;
};

std::vector<double> reference(const std::vector<float>& q, int W, int n_heads, int q0, int kv_head, int G,
                              const std::vector<float>& k, const std::vector<int32_t>& pos, int T, int d) {
  std::vector<double> out(static_cast<size_t>(G) * W * T, 0.0);
  for (int g = 0; g < G; ++g) {
    const int h = kv_head * G + g;
    for (int w = 0; w < W; ++w) {
      std::vector<double> logit(T);
      double m = -INFINITY;
      for (int t = 0; t < T; ++t) {
        if (pos[t] > q0 + w) continue;
        double s = 0;
        for (int i = 0; i < d; ++i) s += double(q[(size_t(w) * n_heads + h) * d + i]) * k[size_t(t) * d + i];
        logit[t] = s / std::sqrt(double(d));
        m = std::max(m, logit[t]);
      }
      if (m == -INFINITY) continue;
      double sum = 0;
      for (int t = 0; t < T; ++t)
        if (pos[t] <= q0 + w) sum += std::exp(logit[t] - m);
      for (int t = 0; t < T; ++t)
        if (pos[t] <= q0 + w) out[(size_t(g) * W + w) * T + t] = std::exp(logit[t] - m) / sum;
    }
  }
  return out;
}

class WindowAttention : public ::testing::TestWithParam<Case> {};

TEST_P(WindowAttention, MatchesScalarSoftmax) {
  const Case c = GetParam();
  std::mt19937 rng(c.T * 31 + c.W);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> q(static_cast<size_t>(c.W) * c.n_heads * c.d), k(static_cast<size_t>(c.T) * c.d);
  for (float& v : q) v = normal(rng);
  for (float& v : k) v = normal(rng);
  // Positions with gaps (an evicted cache); the window queries start inside the range so that the
  // first rows see only part of it, and row 0 of one case sees nothing.
  std::vector<int32_t> pos(c.T);
  int32_t p = 3;
  for (int t = 0; t < c.T; ++t) pos[t] = (p += 1 + static_cast<int32_t>(rng() % 3));
  const int kv_heads = c.n_heads / c.group;
  const int32_t q0 = c.T > 4 ? pos[c.T - 4] - 2 : pos[0] - 1;  // first query sees fewer than all
  if (c.shuffled) std::shuffle(pos.begin(), pos.end(), rng);  // keys keep their rows, positions move
  for (int kv = 0; kv < kv_heads; ++kv) {
    std::vector<float> out(static_cast<size_t>(c.group) * c.W * c.T, -1.0f);
    compute_window_attention(q.data(), c.W, c.n_heads, q0, kv, c.group, k.data(), pos.data(), c.T, c.d, out.data());
    const auto want = reference(q, c.W, c.n_heads, q0, kv, c.group, k, pos, c.T, c.d);
    double max_err = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (want[i] == 0.0) {
        ASSERT_EQ(out[i], 0.0f) << "invisible entry " << i << " not exactly 0";
      }
      max_err = std::max(max_err, std::abs(out[i] - want[i]));
    }
    EXPECT_LT(max_err, 2e-6) << "kv head " << kv;
    // Every row that sees something sums to 1.
    for (int r = 0; r < c.group * c.W; ++r) {
      const double s = std::accumulate(out.begin() + size_t(r) * c.T, out.begin() + size_t(r + 1) * c.T, 0.0);
      const double ws = std::accumulate(want.begin() + size_t(r) * c.T, want.begin() + size_t(r + 1) * c.T, 0.0);
      EXPECT_NEAR(s, ws, 1e-5) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, WindowAttention,
                         ::testing::Values(Case{1, 4, 2, 37, 8, false}, Case{5, 6, 3, 129, 10, false},
                                           Case{32, 9, 3, 300, 64, false}, Case{7, 4, 2, 61, 16, true},
                                           Case{3, 2, 1, 17, 5, true}, Case{4, 2, 2, 1, 4, false}));

}  // namespace
}  // namespace kvevict
