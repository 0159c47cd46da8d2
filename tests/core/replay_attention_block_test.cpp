// KVzip's replay attention as a decoder hands it (core/decode/replay_attention_block.h): the host rule
// (what the CPU decoder hands: the replay observer's own loop before, moved) against a scalar double
// reference written from the definition, and the device's algorithm on the CPU
// (replay_attention_twin: the rows gathered, the window attention kernel's twin per piece of replay
// rows, the maxima folded) against the host rule.
//
// Tolerances. The host rule against the double reference: f32 logits of head_dim <= 32 products
// spread ~1.5 either way, a probability carries its logit's error as a relative error (~1e-6): held
// to 1e-4 relative + 1e-7. The twin against the host rule: each probability within the window
// attention twin's tolerance of the host's (1e-3 relative + 1e-7, tests/core/window_attention_twin_
// test.cpp), and a max of such values, times the same factor rounded to f32, stays within it. A wrong
// sink count, chunk border, causal mask or factor changes entries by O(1) relative (the controls).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/device_kv_twin.h"
#include "core/decode/replay_attention_block.h"
#include "core/decode/window_attention_twin.h"
#include "core/model/model.h"
#include "relative_error.h"

namespace kvevict {
namespace {

struct Case {
  int n_heads, n_kv, d;
  int context, first, end, sinks, R;
  bool normalised;
  KvType type;
};

std::string name(const Case& c) {
  return "H" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv) + " d" + std::to_string(c.d) + " L" +
         std::to_string(c.context) + " chunk [" + std::to_string(c.first) + ", " + std::to_string(c.end) + ") sinks " +
         std::to_string(c.sinks) + " R" + std::to_string(c.R) + (c.normalised ? " normalised " : " ") +
         kv_type_name(c.type);
}

ReplayAttentionRequest request_of(const Case& c) { return {c.context, c.first, c.end, c.sinks, c.normalised}; }

// One layer after a replay block's append: the context's entries and the replay's at positions
// 0 .. context + R - 1, the replay's query rows and attention inputs (for the row factors).
struct Replay {
  ModelConfig config;
  KVCache cache;
  std::vector<float> queries;  // [R][n_heads][d]
  std::vector<float> hidden;   // [R][dim]
  std::vector<double> factors;
  std::vector<float> factors_f32;
  DeviceKvTwin twin;
  Replay(const Case& c, uint32_t seed)
      : config(config_of(c)), cache(config, c.type), twin(DeviceKvGeometry{1, c.n_kv, c.d, c.type}) {
    std::mt19937 rng(seed);
    // Logits q . k / sqrt(d) spread ~1.5 either way.
    std::normal_distribution<float> normal(0.0f, std::pow(float(c.d), -0.25f) * 1.2f);
    const int n = c.context + c.R;
    std::vector<float> key(size_t(c.d)), value(size_t(c.d));
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) positions[size_t(t)] = t;
    for (int h = 0; h < c.n_kv; ++h)
      for (int t = 0; t < n; ++t) {
        for (int i = 0; i < c.d; ++i) key[size_t(i)] = normal(rng), value[size_t(i)] = normal(rng);
        cache.append(0, h, t, key.data(), value.data());
      }
    queries.resize(size_t(c.R) * c.n_heads * c.d);
    for (float& q : queries) q = normal(rng);
    hidden.resize(size_t(c.R) * config.dim);
    std::uniform_real_distribution<float> spread(-3.0f, 3.0f);
    for (float& x : hidden) x = spread(rng);
    factors = replay_row_factors(request_of(c), hidden.data(), hidden.size(), c.R);
    factors_f32.assign(factors.begin(), factors.end());
    for (int h = 0; h < c.n_kv; ++h) {
      std::vector<float> k(size_t(n) * c.d), v(k.size());
      cache.reconstruct_keys(0, h, 0, n, k.data());
      cache.reconstruct_values(0, h, 0, n, v.data());
      twin.write_rows(0, h, 0, n, k.data(), v.data(), positions.data());
    }
  }
  const float* twin_factors() const { return factors_f32.empty() ? nullptr : factors_f32.data(); }
  static ModelConfig config_of(const Case& c) {
    ModelConfig m;
    m.n_layers = 1, m.n_heads = c.n_heads, m.n_kv_heads = c.n_kv, m.head_dim = c.d, m.dim = c.n_heads * c.d;
    m.hidden_dim = 8, m.vocab_size = 8, m.context_length = 4096;
    return m;
  }
};

// The definition, in double: query row i of head h softmaxes over the sinks, the chunk and the
// replay entries up to its own; each chunk entry keeps the largest probability times the row's factor
// (1 / ||x_i||, from the attention inputs, when normalised).
std::vector<double> reference(const Replay& P, const Case& c) {
  const int chunk = c.end - c.first, G = c.n_heads / c.n_kv, n = c.context + c.R;
  std::vector<double> out(size_t(c.n_heads) * chunk, 0.0);
  std::vector<float> keys(size_t(n) * c.d);
  std::vector<int> subset;
  for (int t = 0; t < c.sinks; ++t) subset.push_back(t);
  for (int t = c.first; t < c.end; ++t) subset.push_back(t);
  for (int h = 0; h < c.n_heads; ++h) {
    P.cache.reconstruct_keys(0, h / G, 0, n, keys.data());
    for (int i = 0; i < c.R; ++i) {
      double f = 1;
      if (c.normalised) {
        double ss = 0;
        for (int x = 0; x < P.config.dim; ++x) ss += std::pow(double(P.hidden[size_t(i) * P.config.dim + x]), 2);
        f = 1 / std::sqrt(ss);
      }
      std::vector<int> visible = subset;
      for (int j = 0; j <= i; ++j) visible.push_back(c.context + j);
      std::vector<double> logit;
      double m = -INFINITY;
      for (int t : visible) {
        double dot = 0;
        for (int x = 0; x < c.d; ++x) dot += double(P.queries[(size_t(i) * c.n_heads + h) * c.d + x]) * keys[size_t(t) * c.d + x];
        logit.push_back(dot / std::sqrt(double(c.d)));
        m = std::max(m, logit.back());
      }
      double z = 0;
      for (double l : logit) z += std::exp(l - m);
      for (int u = 0; u < chunk; ++u) {
        const double p = std::exp(logit[size_t(c.sinks + u)] - m) / z * f;
        out[size_t(h) * chunk + u] = std::max(out[size_t(h) * chunk + u], p);
      }
    }
  }
  return out;
}

using test::worst_ratio;

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {4, 2, 16, 40, 0, 16, 0, 9, false, KvType::F16},    // the first chunk: no sinks (min(n_sink, 0))
      {4, 2, 16, 40, 16, 32, 4, 12, false, KvType::F16},  // a middle chunk behind 4 sinks
      {6, 3, 8, 50, 48, 50, 4, 5, true, KvType::F32},     // a short last chunk, KVzip+'s row factors
      {8, 2, 32, 30, 10, 30, 10, 20, false, KvType::BF16},  // sinks up to the chunk, G = 4
      {4, 4, 16, 12, 3, 4, 1, 1, true, KvType::F32},      // one chunk entry, one replay row
      {4, 1, 16, 300, 128, 256, 4, 40, false, KvType::F16},  // one KV head for 4 query heads
  };
  return all;
}

TEST(ReplayAttentionBlock, TheHostRuleIsTheDefinition) {
  double observed = 0;
  for (const Case& c : cases()) {
    const Replay P(c, 11);
    const BlockReplayAttention got =
        block_replay_attention(request_of(c), P.queries.data(), c.R, P.factors, P.cache, 0, c.n_heads);
    ASSERT_EQ(got.n_heads, c.n_heads) << name(c);
    ASSERT_EQ(got.first, c.first) << name(c);
    ASSERT_EQ(got.length, c.end - c.first) << name(c);
    std::string at;
    const double r = worst_ratio(got.values, reference(P, c), 1e-4, 1e-7, &at);
    EXPECT_LE(r, 1.0) << name(c) << ": " << at;
    observed = std::max(observed, r);
  }
  std::printf("[ observed ] host rule vs double definition: worst err / tol %.3g\n", observed);
}

TEST(ReplayAttentionBlock, TheTwinAgreesWithTheHostRuleInPiecesOfAnySize) {
  double observed = 0;
  for (const Case& c : cases()) {
    const Replay P(c, 23);
    const int G = c.n_heads / c.n_kv;
    const BlockReplayAttention host =
        block_replay_attention(request_of(c), P.queries.data(), c.R, P.factors, P.cache, 0, c.n_heads);
    const BlockReplayAttention twin =
        replay_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.R, request_of(c), P.twin_factors());
    ASSERT_EQ(twin.first, c.first) << name(c);
    ASSERT_EQ(twin.length, c.end - c.first) << name(c);
    std::string at;
    const double r = worst_ratio(twin.values, host.values, 1e-3, 1e-7, &at);
    EXPECT_LE(r, 1.0) << name(c) << ": " << at;
    observed = std::max(observed, r);
    // Pieces of one row and of a few: the window attention's plan follows the piece's rows, so a
    // probability's f32 reductions run in another order: a few ulps, held to 1e-5 relative.
    const size_t m = size_t(replay_gathered_rows(request_of(c), c.R));
    for (size_t floats : {size_t{1}, size_t(c.n_heads) * m * 2 + 1}) {
      const BlockReplayAttention pieces = replay_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.R,
                                                                request_of(c), P.twin_factors(), floats);
      EXPECT_LE(worst_ratio(pieces.values, twin.values, 1e-5, 1e-7, &at), 1.0)
          << name(c) << " in pieces of " << floats << " floats: " << at;
    }
  }
  std::printf("[ observed ] twin vs host rule: worst err / tol %.3g\n", observed);
}

// Controls: the comparison above sees a wrong sink count, chunk border, causal mask or factor.
TEST(ReplayAttentionBlock, ControlsAWrongSinkBorderMaskOrFactorIsSeen) {
  const Case c = cases()[1];
  const Replay P(c, 5);
  const int G = c.n_heads / c.n_kv;
  const BlockReplayAttention host =
      block_replay_attention(request_of(c), P.queries.data(), c.R, P.factors, P.cache, 0, c.n_heads);
  const auto twin_with = [&](ReplayAttentionRequest r, const float* factors = nullptr) {
    return replay_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.R, r, factors).values;
  };
  ReplayAttentionRequest r = request_of(c);
  EXPECT_LE(worst_ratio(twin_with(r), host.values, 1e-3, 1e-7), 1.0);
  r.sinks = 0;  // the softmax over fewer entries: larger probabilities
  EXPECT_GT(worst_ratio(twin_with(r), host.values, 1e-3, 1e-7), 10.0) << "sinks left out";
  // The chunk one entry later: a window over other keys (compared over the same count).
  r = request_of(c);
  r.first += 1, r.end += 1;
  EXPECT_GT(worst_ratio(twin_with(r), host.values, 1e-3, 1e-7), 10.0) << "chunk shifted";
  // No causal mask among the replay rows: the twin's rows see the later replay entries too.
  const DeviceKvLayerView view = P.twin.layer_view(0);
  const int m = replay_gathered_rows(request_of(c), c.R);
  std::vector<uint16_t> keys(size_t(view.n_heads) * m * view.head_dim);
  std::vector<int32_t> positions(size_t(view.n_heads) * m);
  for (int kv = 0; kv < view.n_heads; ++kv)
    for (int j = 0; j < m; ++j)
      for (int i = -1; i < view.head_dim; ++i)
        replay_gather_element(view, request_of(c), m, kv, j, i, keys.data(), positions.data());
  for (int32_t& p : positions) p = 0;  // every gathered entry at position 0: all visible
  const DeviceKvLayerView flat = replay_gathered_view(view, m, keys.data(), positions.data());
  WindowPlanOptions options;
  options.query_position0 = c.context;
  const WindowAttentionPlan plan = plan_window_attention(flat, c.R, G, options);
  const std::vector<float> window = window_attention_twin(flat, plan, P.queries.data());
  std::vector<float> unmasked(size_t(c.n_heads) * (c.end - c.first), 0.0f);
  for (int h = 0; h < c.n_heads; ++h)
    for (int u = 0; u < c.end - c.first; ++u)
      replay_max_piece_rows(window.data(), {0, c.R}, G, m, request_of(c), nullptr, h, u, unmasked.data());
  EXPECT_GT(worst_ratio(unmasked, host.values, 1e-3, 1e-7), 10.0) << "no causal mask";
  // A factor of 2 on every row: twice the maxima.
  const std::vector<float> twos(size_t(c.R), 2.0f);
  EXPECT_GT(worst_ratio(twin_with(request_of(c), twos.data()), host.values, 1e-3, 1e-7), 100.0) << "factors";
}

TEST(ReplayAttentionBlock, PiecesCoverEveryReplayRowOnce) {
  const ReplayAttentionRequest r{100, 20, 60, 4, false};
  for (int R : {0, 1, 7, 64})
    for (size_t floats : {size_t{1}, size_t{500}, size_t{4} * 110 * 3, size_t{1} << 26}) {
      const std::vector<ReplayPiece> pieces = plan_replay_attention(r, R, 4, floats);
      int next = 0;
      for (const ReplayPiece& p : pieces) {
        EXPECT_EQ(p.first_row, next);
        EXPECT_GE(p.rows, 1);
        EXPECT_TRUE(p.rows == 1 || size_t(4) * p.rows * replay_gathered_rows(r, R) <= floats)
            << R << " rows in pieces of " << floats << " floats";
        next += p.rows;
      }
      EXPECT_EQ(next, R);
    }
}

TEST(ReplayAttentionBlock, RefusesRequestsAndCachesThatAreNotAReplays) {
  const Case c = cases()[1];
  const Replay P(c, 7);
  const auto host = [&](ReplayAttentionRequest r, int R) {
    return block_replay_attention(r, P.queries.data(), R, {}, P.cache, 0, c.n_heads);
  };
  ReplayAttentionRequest r = request_of(c);
  EXPECT_NO_THROW(host(r, c.R));
  for (ReplayAttentionRequest bad : {ReplayAttentionRequest{0, 0, 1, 0, false},
                                     ReplayAttentionRequest{c.context, 10, 10, 0, false},
                                     ReplayAttentionRequest{c.context, 30, 20, 0, false},
                                     ReplayAttentionRequest{c.context, 16, c.context + 1, 0, false},
                                     ReplayAttentionRequest{c.context, 16, 32, 17, false},
                                     ReplayAttentionRequest{c.context, 16, 32, -1, false}}) {
    EXPECT_THROW(host(bad, c.R), std::invalid_argument);
    EXPECT_FALSE(replay_attention_applies(P.twin.layer_view(0), bad, c.R));
  }
  // The cache must hold the context and exactly R replay entries.
  EXPECT_THROW(host(r, c.R - 1), std::invalid_argument);
  EXPECT_FALSE(replay_attention_applies(P.twin.layer_view(0), r, c.R - 1));
  EXPECT_THROW(replay_attention_twin(P.twin.layer_view(0), 2, P.queries.data(), c.R - 1, r, nullptr),
               std::invalid_argument);
  // KVzip+'s factors need the attention inputs.
  r.hidden_normalised = true;
  EXPECT_THROW(replay_row_factors(r, nullptr, 0, c.R), std::logic_error);
  EXPECT_THROW(replay_row_factors(r, P.hidden.data(), P.hidden.size() - 1, c.R), std::logic_error);
  EXPECT_EQ(replay_row_factors(r, P.hidden.data(), P.hidden.size(), c.R).size(), size_t(c.R));
  r.hidden_normalised = false;
  EXPECT_TRUE(replay_row_factors(r, nullptr, 0, c.R).empty());
}

}  // namespace
}  // namespace kvevict
