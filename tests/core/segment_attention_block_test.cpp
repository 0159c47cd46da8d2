// The prompt's segment-local attention as a decoder hands it (core/decode/segment_attention_block.h):
// the host rule (what the CPU decoder hands, the engine's own computation) against a scalar double
// reference written from the definition (segment_observation.h), and the device's algorithm on the
// CPU (segment_attention_twin: the window attention kernel's twin per piece) against the host rule.
//
// Tolerances. The host rule against the double reference: f32 logits of head_dim <= 32 products
// spread ~1.5 either way, a probability carries its logit's error as a relative error (~1e-6);
// each A_seg entry is a sum of at most W positive probabilities, so it is held to 1e-4 relative +
// 1e-6. The twin against the host rule: each probability is within the window attention twin's
// tolerance of the host's (1e-3 relative + 1e-7, tests/core/window_attention_twin_test.cpp), so a sum
// of at most W of them is within 1e-3 relative + W * 1e-7. A wrong head, segment border, mask or
// scale changes entries by O(1) relative (the controls below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/decode/device_kv_twin.h"
#include "core/decode/segment_attention_block.h"
#include "core/model/model.h"
#include "relative_error.h"

namespace kvevict {
namespace {

struct Case {
  int n_heads, n_kv, d, n, segment, window;
  bool causal, scaled;
  KvType type;
};

std::string name(const Case& c) {
  return "H" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv) + " d" + std::to_string(c.d) + " n" +
         std::to_string(c.n) + " seg" + std::to_string(c.segment) + " W" + std::to_string(c.window) +
         (c.causal ? " causal" : " non-causal") + (c.scaled ? " scaled" : " unscaled") + " " + kv_type_name(c.type);
}

struct Prompt {
  ModelConfig config;
  KVCache cache;
  std::vector<float> queries;  // [n][n_heads][d]
  DeviceKvTwin twin;
  Prompt(const Case& c, uint32_t seed)
      : config(config_of(c)), cache(config, c.type), twin(DeviceKvGeometry{1, c.n_kv, c.d, c.type}) {
    std::mt19937 rng(seed);
    // Logits q . k / sqrt(d) spread ~1.5 either way (scaled; about sqrt(d) times that unscaled).
    std::normal_distribution<float> normal(0.0f, std::pow(float(c.d), -0.25f) * 1.2f);
    std::vector<float> key(size_t(c.d)), value(size_t(c.d));
    std::vector<std::vector<float>> keys(size_t(c.n_kv)), values(size_t(c.n_kv));
    std::vector<int32_t> positions(size_t(c.n));
    for (int t = 0; t < c.n; ++t) positions[size_t(t)] = t;
    for (int h = 0; h < c.n_kv; ++h)
      for (int t = 0; t < c.n; ++t) {
        for (int i = 0; i < c.d; ++i) key[size_t(i)] = normal(rng), value[size_t(i)] = normal(rng);
        cache.append(0, h, t, key.data(), value.data());
      }
    queries.resize(size_t(c.n) * c.n_heads * c.d);
    for (float& q : queries) q = normal(rng);
    // The twin holds what the cache holds (its rows as f32, converted back as the device would).
    for (int h = 0; h < c.n_kv; ++h) {
      std::vector<float> k(size_t(c.n) * c.d), v(k.size());
      cache.reconstruct_keys(0, h, 0, c.n, k.data());
      cache.reconstruct_values(0, h, 0, c.n, v.data());
      twin.write_rows(0, h, 0, c.n, k.data(), v.data(), positions.data());
    }
  }
  static ModelConfig config_of(const Case& c) {
    ModelConfig m;
    m.n_layers = 1, m.n_heads = c.n_heads, m.n_kv_heads = c.n_kv, m.head_dim = c.d, m.dim = c.n_heads * c.d;
    m.hidden_dim = 8, m.vocab_size = 8, m.context_length = 4096;
    return m;
  }
};

SegmentAttentionRequest request_of(const Case& c) { return {c.segment, c.window, c.causal, c.scaled}; }

// The definition, in double: for each query head h and each observation query p of a segment
// (its last min(W, length) positions), a softmax over the segment's entries (k <= p if causal) of
// q_p . k / sqrt(d) (or unscaled), summed into the entries.
std::vector<double> reference(const Prompt& P, const Case& c) {
  std::vector<double> out(size_t(c.n_heads) * c.n, 0.0);
  const int G = c.n_heads / c.n_kv;
  std::vector<float> keys(size_t(c.n) * c.d);
  std::vector<double> logit(size_t(c.n));
  for (int h = 0; h < c.n_heads; ++h) {
    P.cache.reconstruct_keys(0, h / G, 0, c.n, keys.data());
    for (int first = 0; first < c.n; first += c.segment) {
      const int end = std::min(first + c.segment, c.n);
      for (int p = std::max(first, end - c.window); p < end; ++p) {
        const int last = c.causal ? p : end - 1;
        double m = -INFINITY;
        for (int k = first; k <= last; ++k) {
          double dot = 0;
          for (int i = 0; i < c.d; ++i)
            dot += double(P.queries[(size_t(p) * c.n_heads + h) * c.d + i]) * keys[size_t(k) * c.d + i];
          logit[size_t(k)] = c.scaled ? dot / std::sqrt(double(c.d)) : dot;
          m = std::max(m, logit[size_t(k)]);
        }
        double l = 0;
        for (int k = first; k <= last; ++k) l += std::exp(logit[size_t(k)] - m);
        for (int k = first; k <= last; ++k) out[size_t(h) * c.n + k] += std::exp(logit[size_t(k)] - m) / l;
      }
    }
  }
  return out;
}

using test::worst_ratio;

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {4, 2, 16, 37, 8, 3, true, true, KvType::F16},      // several segments, a short last one
      {6, 3, 8, 50, 16, 16, false, false, KvType::F32},   // NonCausalAttnPress: window = segment, unscaled
      {2, 2, 32, 20, 7, 100, true, true, KvType::BF16},   // a window past the segment: every query observes
      {8, 2, 8, 11, 64, 4, true, true, KvType::F16},      // one segment shorter than `segment`
      {4, 4, 16, 9, 1, 1, false, true, KvType::F32},      // segments of one entry: each sees itself only
      {4, 1, 16, 300, 64, 32, true, false, KvType::F16},  // one KV head for 4 query heads, 5 segments
  };
  return all;
}

TEST(SegmentAttentionBlock, TheHostRuleIsTheDefinition) {
  double observed = 0;
  for (const Case& c : cases()) {
    const Prompt P(c, 11);
    const BlockSegmentAttention got =
        block_segment_attention(request_of(c), P.queries.data(), c.n, P.cache, 0, c.n_heads);
    ASSERT_EQ(got.n_heads, c.n_heads) << name(c);
    ASSERT_EQ(got.length, c.n) << name(c);
    std::string at;
    const double r = worst_ratio(got.values, reference(P, c), 1e-4, 1e-6, &at);
    EXPECT_LE(r, 1.0) << name(c) << ": " << at;
    observed = std::max(observed, r);
    // Each observation query's probabilities sum to 1 over its segment: a segment sums to the
    // number of its observation queries, per head.
    for (int h = 0; h < c.n_heads; ++h)
      for (int first = 0; first < c.n; first += c.segment) {
        const int end = std::min(first + c.segment, c.n);
        double sum = 0;
        for (int p = first; p < end; ++p) sum += got.head(h)[p];
        EXPECT_NEAR(sum, std::min(c.window, end - first), 1e-4 * c.window) << name(c) << " head " << h;
      }
  }
  std::printf("[ observed ] host rule vs double definition: worst err / tol %.3g\n", observed);
}

TEST(SegmentAttentionBlock, TheTwinAgreesWithTheHostRuleInPiecesOfAnySize) {
  double observed = 0;
  for (const Case& c : cases()) {
    const Prompt P(c, 23);
    const int G = c.n_heads / c.n_kv;
    const BlockSegmentAttention host =
        block_segment_attention(request_of(c), P.queries.data(), c.n, P.cache, 0, c.n_heads);
    const BlockSegmentAttention twin =
        segment_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.n, request_of(c));
    std::string at;
    const double r = worst_ratio(twin.values, host.values, 1e-3, std::min(c.window, c.segment) * 1e-7, &at);
    EXPECT_LE(r, 1.0) << name(c) << ": " << at;
    observed = std::max(observed, r);
    // Pieces of one row (and of a few): the window attention's plan (rows per block, threads per
    // row) follows the piece's rows, so a probability's f32 reductions run in another order: a few
    // ulps, held to 1e-5 relative (the kernel-vs-twin tolerance of window_attention_gpu_test.cpp).
    for (size_t floats : {size_t{1}, size_t(c.n_heads) * c.segment * 2 + 1}) {
      const BlockSegmentAttention pieces =
          segment_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.n, request_of(c), floats);
      EXPECT_LE(worst_ratio(pieces.values, twin.values, 1e-5, std::min(c.window, c.segment) * 1e-7, &at), 1.0)
          << name(c) << " in pieces of " << floats << " floats: " << at;
    }
  }
  std::printf("[ observed ] twin vs host rule: worst err / tol %.3g\n", observed);
}

// Controls: the comparisons above see a wrong mask, a wrong segment border, a wrong scale and a
// wrong head map.
TEST(SegmentAttentionBlock, ControlsAWrongMaskBorderScaleOrHeadIsSeen) {
  const Case c = cases()[0];
  const Prompt P(c, 5);
  const int G = c.n_heads / c.n_kv;
  const BlockSegmentAttention host =
      block_segment_attention(request_of(c), P.queries.data(), c.n, P.cache, 0, c.n_heads);
  const auto twin_with = [&](SegmentAttentionRequest r) {
    return segment_attention_twin(P.twin.layer_view(0), G, P.queries.data(), c.n, r).values;
  };
  SegmentAttentionRequest r = request_of(c);
  r.causal = !r.causal;
  EXPECT_GT(worst_ratio(twin_with(r), host.values, 1e-3, 3e-7), 100.0) << "mask";
  r = request_of(c);
  r.segment += 1;
  EXPECT_GT(worst_ratio(twin_with(r), host.values, 1e-3, 3e-7), 100.0) << "border";
  r = request_of(c);
  r.scaled = !r.scaled;
  EXPECT_GT(worst_ratio(twin_with(r), host.values, 1e-3, 3e-7), 100.0) << "scale";
  std::vector<float> swapped = twin_with(request_of(c));
  std::swap_ranges(swapped.begin(), swapped.begin() + c.n, swapped.begin() + size_t(G) * c.n);  // head 0 <-> head G
  EXPECT_GT(worst_ratio(swapped, host.values, 1e-3, 3e-7), 100.0) << "head";
}

TEST(SegmentAttentionBlock, PiecesCoverEveryObservationRowOnce) {
  const SegmentAttentionRequest r{10, 4, true, true};
  for (size_t floats : {size_t{1}, size_t{2 * 2 * 10}, size_t{1} << 26}) {
    const std::vector<SegmentPiece> pieces = plan_segment_attention(r, 25, 2, floats);
    std::vector<int> rows;
    for (const SegmentPiece& p : pieces) {
      EXPECT_EQ(p.segment_first % 10, 0);
      EXPECT_EQ(p.segment_length, std::min(10, 25 - p.segment_first));
      EXPECT_GE(p.rows, 1);
      EXPECT_LE(size_t(2) * p.rows * p.segment_length, std::max(floats, size_t(2) * p.segment_length));
      for (int i = 0; i < p.rows; ++i) rows.push_back(p.first_row + i);
    }
    EXPECT_EQ(rows, (std::vector<int>{6, 7, 8, 9, 16, 17, 18, 19, 21, 22, 23, 24})) << floats;
  }
  EXPECT_THROW(plan_segment_attention({0, 4, true, true}, 25, 2), std::invalid_argument);
  EXPECT_THROW(plan_segment_attention(r, 0, 2), std::invalid_argument);
}

TEST(SegmentAttentionBlock, RefusesACacheThatIsNotThePrompts) {
  const Case c = cases()[0];
  Prompt P(c, 3);
  const std::vector<float> row(size_t(c.d), 0.5f);
  EXPECT_THROW(block_segment_attention(request_of(c), P.queries.data(), c.n - 1, P.cache, 0, c.n_heads),
               std::invalid_argument)
      << "a head longer than the prompt";
  P.cache.append(0, 0, c.n + 5, row.data(), row.data());
  EXPECT_THROW(block_segment_attention(request_of(c), P.queries.data(), c.n, P.cache, 0, c.n_heads),
               std::invalid_argument);
  EXPECT_FALSE(segment_attention_applies(P.twin.layer_view(0), c.n + 1)) << "heads of another length";
  EXPECT_TRUE(segment_attention_applies(P.twin.layer_view(0), c.n));
}

}  // namespace
}  // namespace kvevict
