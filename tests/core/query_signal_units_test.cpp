// The mechanisms behind the query and model signals on synthetic data, against direct double
// computations: the prompt query statistics over several blocks (Chan's merge) and their rotation,
// the mean RoPE matrix, the window query rows, outputs and pre-RoPE rows, the records by position,
// out_norm from the output-projection Grams, and the delimiter window. (The signals as the engine
// hands them on a real model: query_signal_policies_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/decode/layer_observation.h"
#include "core/decode/rope.h"
#include "core/engine/model_signals.h"
#include "core/engine/query_signals.h"
#include "core/engine/window_observation.h"
#include "core/util/error.h"
#include "dsl/interpreter.h"
#include "dsl/policy_file.h"

namespace kvevict {
namespace {

ModelConfig small_config(RopeStyle style) {
  ModelConfig c;
  c.head_dim = 6;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.n_layers = 2;
  c.dim = 24;
  c.rope_theta = 100.0f;
  c.rope_style = style;
  return c;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(QuerySignalUnits, StatisticsOverBlocksEqualTheDirectMomentsAndRotate) {
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const ModelConfig c = small_config(style);
    const int H = c.n_heads, d = c.head_dim, S = 23, from = 3;
    const Rope rope(c);
    // Pre-RoPE queries, rotated as the decoder hands them over.
    const std::vector<float> pre = random_floats(static_cast<size_t>(S) * H * d, 7);
    std::vector<float> post = pre;
    for (int i = 0; i < S; ++i)
      for (int h = 0; h < H; ++h) rope.forward(post.data() + (static_cast<size_t>(i) * H + h) * d, i);
    QueryStatistics stats;
    stats.reset(c.n_layers, H, d, true, from);
    for (int first : {0, 2, 9, 17}) {  // blocks [0, 2), [2, 9), [9, 17), [17, S)
      const int end = first == 17 ? S : first == 9 ? 17 : first == 2 ? 9 : 2;
      stats.record(1, post.data() + static_cast<size_t>(first) * H * d, end - first, first, rope);
    }
    EXPECT_EQ(stats.count(1), S - from);
    EXPECT_EQ(stats.count(0), 0);
    const std::vector<double> R = average_rope_rotation(c, S, 5);
    for (int kv = 0; kv < c.n_kv_heads; ++kv) {
      const int G = H / c.n_kv_heads;
      std::vector<float> mean(static_cast<size_t>(G) * d), cov(static_cast<size_t>(G) * d * d);
      std::vector<float> rmean(mean.size()), rcov(cov.size());
      stats.head_statistics(1, kv, G, nullptr, mean.data(), cov.data());
      stats.head_statistics(1, kv, G, R.data(), rmean.data(), rcov.data());
      for (int g = 0; g < G; ++g) {
        const int h = kv * G + g;
        std::vector<double> mu(d, 0.0), C(static_cast<size_t>(d) * d, 0.0);
        for (int i = from; i < S; ++i)
          for (int a = 0; a < d; ++a) mu[a] += pre[(static_cast<size_t>(i) * H + h) * d + a] / (S - from);
        for (int i = from; i < S; ++i)
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              C[a * d + b] += (pre[(static_cast<size_t>(i) * H + h) * d + a] - mu[a]) *
                              (pre[(static_cast<size_t>(i) * H + h) * d + b] - mu[b]) / (S - from);
        for (int a = 0; a < d; ++a) {
          EXPECT_NEAR(mean[g * d + a], mu[a], 1e-5);
          double want = 0;  // R mu, with R the mean of rope matrices applied directly
          for (int p = S; p < S + 5; ++p) {
            std::vector<float> x(mu.begin(), mu.end());
            rope.forward(x.data(), p);
            want += x[a] / 5.0;
          }
          EXPECT_NEAR(rmean[g * d + a], want, 1e-5);
          for (int b = 0; b < d; ++b) {
            EXPECT_NEAR(cov[(static_cast<size_t>(g) * d + a) * d + b], C[a * d + b], 1e-5);
            double rcr = 0;
            for (int k = 0; k < d; ++k)
              for (int l = 0; l < d; ++l) rcr += R[a * d + k] * C[k * d + l] * R[b * d + l];
            EXPECT_NEAR(rcov[(static_cast<size_t>(g) * d + a) * d + b], rcr, 1e-5);
          }
        }
      }
    }
  }
}

TEST(QuerySignalUnits, WindowRowsOutputsAndPreRopeRows) {
  const ModelConfig c = small_config(RopeStyle::AdjacentPairs);
  const int H = c.n_heads, d = c.head_dim, W = 3, T = 5, G = 2, kv = 1, p0 = 4;
  const Rope rope(c);
  const std::vector<float> rows = random_floats(static_cast<size_t>(W) * H * d, 3);
  const std::vector<float> keys = random_floats(static_cast<size_t>(T) * d, 4);
  const std::vector<float> values = random_floats(static_cast<size_t>(T) * d, 5);
  const std::vector<int32_t> pos = {0, 1, 2, 5, 6};
  const WindowQueries q{rows.data(), W, H, p0};
  std::vector<float> Q, Qpre, O;
  window_query_signal(TensorSignal::WindowQueryRows, q, kv, G, rope, nullptr, keys.data(), values.data(), pos.data(), T, d,
                      true, Q);
  window_query_signal(TensorSignal::WindowQueryRowsPreRope, q, kv, G, rope, nullptr, keys.data(), values.data(), pos.data(),
                      T, d, true, Qpre);
  window_query_signal(TensorSignal::WindowOutputs, q, kv, G, rope, nullptr, keys.data(), values.data(), pos.data(), T, d,
                      true, O);
  for (int g = 0; g < G; ++g)
    for (int w = 0; w < W; ++w) {
      const float* row = rows.data() + (static_cast<size_t>(w) * H + kv * G + g) * d;
      std::vector<float> back(row, row + d);
      rope.inverse(back.data(), p0 + w);
      // Causal softmax by position in double, then A V.
      std::vector<double> a(T, 0.0);
      double mx = -INFINITY, z = 0;
      for (int t = 0; t < T; ++t) {
        if (pos[t] > p0 + w) continue;
        double x = 0;
        for (int e = 0; e < d; ++e) x += static_cast<double>(row[e]) * keys[t * d + e];
        a[t] = x / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, a[t]);
      }
      for (int t = 0; t < T; ++t) z += pos[t] <= p0 + w ? std::exp(a[t] - mx) : 0.0;
      for (int e = 0; e < d; ++e) {
        const size_t i = (static_cast<size_t>(g) * W + w) * d + e;
        EXPECT_EQ(Q[i], row[e]);
        EXPECT_NEAR(Qpre[i], back[e], 1e-6);
        double o = 0;
        for (int t = 0; t < T; ++t)
          if (pos[t] <= p0 + w) o += std::exp(a[t] - mx) / z * values[t * d + e];
        EXPECT_NEAR(O[i], o, 1e-5);
      }
    }
}

TEST(QuerySignalUnits, RecordsReadThroughPositionsAndOutputNormsFromGrams) {
  const int n_tokens = 4, dim = 5, heads = 2, d = 3;
  const std::vector<int> tokens = {11, 12, 13, 14};
  const std::vector<float> x = random_floats(static_cast<size_t>(n_tokens) * dim, 9);
  std::vector<float> norms(n_tokens);
  hidden_state_norms(x.data(), n_tokens, dim, norms.data());
  PositionRecords rec;
  rec.reset(2, true, true);
  LayerSignals s;
  s.layer = 0;
  s.first_position = 2;
  s.n_tokens = n_tokens;
  s.tokens = tokens;
  s.hidden_norms = norms;
  rec.record(s);
  const std::vector<int32_t> pos = {5, 2, 9, 3};  // any order; 9 was never recorded
  std::vector<float> tok(4), hn(4);
  rec.tokens(pos.data(), 4, tok.data());
  rec.hidden_norms(0, pos.data(), 4, hn.data());
  EXPECT_EQ(tok, (std::vector<float>{14, 11, -1, 12}));
  EXPECT_FLOAT_EQ(hn[0], norms[3]);
  EXPECT_FLOAT_EQ(hn[1], norms[0]);
  EXPECT_EQ(hn[2], 0.0f);
  double direct = 0;
  for (int c = 0; c < dim; ++c) direct += double(x[c]) * x[c];
  EXPECT_NEAR(norms[0], std::sqrt(direct), 1e-5);
  // A layer whose decoder did not hand norms over is a usage error, not a silent zero.
  s.layer = 1;
  s.hidden_norms = {};
  EXPECT_THROW(rec.record(s), UsageError);
  // Positions beyond the cap are refused before anything is allocated.
  s.hidden_norms = norms;
  s.first_position = kMaxRecordedPositions;
  EXPECT_THROW(rec.record(s), UsageError);

  // W_o [dim][heads * d]; out_norm = ||W_o,h v|| for each head h of the group.
  const std::vector<float> wo = random_floats(static_cast<size_t>(dim) * heads * d, 10);
  const std::vector<float> grams = output_projection_grams(TypedMatrix::f32(wo, dim, heads * d), heads, d);
  const std::vector<float> values = random_floats(static_cast<size_t>(3) * d, 11);
  std::vector<float> out(static_cast<size_t>(heads) * 3);
  output_norms(grams.data(), 0, heads, d, values.data(), 3, out.data());
  for (int h = 0; h < heads; ++h)
    for (int t = 0; t < 3; ++t) {
      double s2 = 0;
      for (int r = 0; r < dim; ++r) {
        double y = 0;
        for (int a = 0; a < d; ++a) y += double(wo[static_cast<size_t>(r) * heads * d + h * d + a]) * values[t * d + a];
        s2 += y * y;
      }
      EXPECT_NEAR(out[static_cast<size_t>(h) * 3 + t], std::sqrt(s2), 1e-5);
    }
  EXPECT_THROW(output_projection_grams(TypedMatrix::f32(wo, dim, heads * d), heads + 1, d), std::invalid_argument);
}

TEST(QuerySignalUnits, WindowAfterTheLastDelimiter) {
  const std::vector<int> t = {1, 7, 3, 7, 4, 5};
  EXPECT_EQ(window_after_token(t, 7), 2);
  EXPECT_EQ(window_after_token(t, 5), 0);
  EXPECT_EQ(window_after_token(t, 9), -1);
  EXPECT_EQ(window_after_token({}, 9), -1);
}


// ExpectedAttention's covariance term through the interpreter: sum over d, e of Q_cov[h, d, e]
// K[d, t] K[e, t], with Q_cov laid out [h][d][e] (signals.h) and K [d][t].
TEST(QuerySignalUnits, CovarianceQuadraticFormThroughTheInterpreter) {
  const int G = 2, d = 3, T = 4;
  const auto policy = dsl::compile_policy_text("q.yaml",
                                               "name: q\nabout: x\nscore: |\n"
                                               "  kc[h, d, t] = sum(e: Q_cov[h, d, e] * K[e, t])\n"
                                               "  score[t] = sum(h: sum(d: kc[h, d, t] * K[d, t]))\n");
  const std::vector<float> cov = random_floats(static_cast<size_t>(G) * d * d, 21), K = random_floats(static_cast<size_t>(d) * T, 22);
  dsl::EvalInputs in;
  in.ext.h = G;
  in.ext.d = d;
  in.ext.t = T;
  in.heads.resize(1);
  in.heads[0].tensors[signal_index(TensorSignal::QueryCovariance)] = cov.data();
  in.heads[0].tensors[signal_index(TensorSignal::Keys)] = K.data();
  const std::vector<float> got = dsl::evaluate(policy.score, in);
  ASSERT_EQ(got.size(), static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) {
    double want = 0;
    for (int h = 0; h < G; ++h)
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) want += double(cov[(h * d + a) * d + b]) * K[a * T + t] * K[b * T + t];
    EXPECT_NEAR(got[t], want, 1e-4) << t;
  }
}

}  // namespace
}  // namespace kvevict
