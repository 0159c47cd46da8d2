// The eviction engine on a small synthetic GQA model through the real CPU decoder: cascading vs
// one-shot, peak bytes during prefill, decode-time triggers over 200 steps, bytes after eviction,
// replay from a PrefillRecorder, and the codebook stage.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"
#include "hand_policies.h"

namespace kvevict {
namespace {

ModelConfig engine_config() {
  ModelConfig c;
  c.name = "engine-test";
  c.n_layers = 6;
  c.dim = 48;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 64;
  c.vocab_size = 300;
  c.context_length = 512;
  return c;
}

std::vector<int> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& v : t) v = static_cast<int>(rng() % 300);
  return t;
}

size_t entry_bytes(const ModelConfig& c) { return 2 * c.head_dim * sizeof(float) + sizeof(int32_t); }

EvictionReport run_prefill(const Model& model, const PolicyProgram& policy, const std::string& budget, int S,
                           uint64_t seed = 0) {
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(policy, model.config, {Budget::parse(budget), seed});
  const auto t = tokens(S, 5);
  decoder->forward(std::span<const int>(t), &engine);
  return engine.report();
}

TEST(EvictionEngine, CascadingMatchesOneShotAndBoundsPeakBytes) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 3);
  constexpr int S = 200, W = 8;
  const test::HandPolicy one_shot = test::cake_policy(W, 200.0, false);
  const test::HandPolicy cascade = test::cake_policy(W, 200.0, true);
  const EvictionReport a = run_prefill(*model, one_shot, "40", S);
  const EvictionReport b = run_prefill(*model, cascade, "40", S);
  ASSERT_TRUE(a.prefill_evicted);
  ASSERT_TRUE(b.prefill_evicted);
  EXPECT_EQ(b.applications, c.n_layers);
  int64_t sum_a = 0, sum_b = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ba = a.layers[l][0].budget, bb = b.layers[l][0].budget;
    sum_a += ba;
    sum_b += bb;
    EXPECT_LE(std::abs(ba - bb), 1) << "layer " << l << ": budgets differ by more than rounding";
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const auto& ka = a.layers[l][h].kept_positions;
      const auto& kb = b.layers[l][h].kept_positions;
      EXPECT_EQ(static_cast<int>(ka.size()), ba);
      EXPECT_EQ(static_cast<int>(kb.size()), bb);
      // Nested top-k over a fixed indicator: equal budgets give equal sets, else one contains the other.
      const auto& small = ka.size() <= kb.size() ? ka : kb;
      const auto& large = ka.size() <= kb.size() ? kb : ka;
      EXPECT_TRUE(std::includes(large.begin(), large.end(), small.begin(), small.end())) << "layer " << l << " head " << h;
      for (int p = S - W; p < S; ++p) EXPECT_TRUE(std::binary_search(kb.begin(), kb.end(), p));
    }
  }
  EXPECT_EQ(sum_a, 40 * c.n_layers);
  EXPECT_EQ(sum_b, 40 * c.n_layers);
  // Peak during cascading prefill: earlier layers already at their stage budgets (which add up to at
  // most the total) plus the newest layer in full, in every KV head.
  const size_t bound = entry_bytes(c) * c.n_kv_heads * (40 * c.n_layers + S);
  EXPECT_LE(b.peak_bytes, bound);
  EXPECT_EQ(a.peak_bytes, a.bytes_full);  // one-shot holds the whole prompt cache until the last layer
  EXPECT_LT(b.peak_bytes, a.peak_bytes);
  EXPECT_EQ(a.bytes_kept, entry_bytes(c) * c.n_kv_heads * 40 * c.n_layers);
  EXPECT_EQ(b.bytes_kept, a.bytes_kept);
  RecordProperty("cascade_peak_over_final", std::to_string(static_cast<double>(b.peak_bytes) / b.bytes_kept));
  RecordProperty("one_shot_peak_over_final", std::to_string(static_cast<double>(a.peak_bytes) / a.bytes_kept));
}

TEST(EvictionEngine, SkipsPrefillWhenThePromptFitsBudgetPlusWindow) {
  const auto model = make_random_model(engine_config(), 3);
  const test::HandPolicy cake = test::cake_policy(8, 200.0, true);
  const EvictionReport r = run_prefill(*model, cake, "40", 48);  // S = C + W
  EXPECT_FALSE(r.prefill_evicted);
  EXPECT_EQ(r.bytes_kept, r.bytes_full);
}

TEST(EvictionEngine, BytesAfterEvictionEqualTheTheoreticalBudget) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 4);
  const test::HandPolicy knorm = test::knorm_policy();
  for (const char* budget : {"25%", "17", "64"}) {
    const EvictionReport r = run_prefill(*model, knorm, budget, 120);
    const int64_t per_head = std::llround(Budget::parse(budget).tokens_per_head(120) * c.n_layers);
    EXPECT_EQ(r.bytes_kept, entry_bytes(c) * c.n_kv_heads * per_head) << budget;
    for (const auto& layer : r.layers)
      for (const HeadReport& h : layer) {
        EXPECT_EQ(h.kept, h.budget);
        EXPECT_TRUE(std::is_sorted(h.kept_positions.begin(), h.kept_positions.end()));
      }
  }
}

int greedy(const std::vector<float>& logits) {
  return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

TEST(EvictionEngine, DecodeEveryStepKeepsTheCacheAtBudgetFor200Steps) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 5);
  const test::HandPolicy h2o = test::h2o_policy(8, 1, 0);
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(h2o, c, {Budget::parse("32"), 0});
  const auto t = tokens(64, 6);
  int next = greedy(decoder->forward(std::span<const int>(t), &engine));
  for (int step = 0; step < 200; ++step) {
    next = greedy(decoder->forward(std::span<const int>(&next, 1), &engine));
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        ASSERT_EQ(decoder->cache().length(l, h), 32) << "step " << step;
        // The newest 8 tokens are protected.
        const int32_t* pos = decoder->cache().positions(l, h);
        std::set<int32_t> p(pos, pos + 32);
        for (int k = 0; k < 8; ++k) ASSERT_TRUE(p.count(64 + step - k)) << "step " << step;
      }
  }
  EXPECT_EQ(engine.report().decode_steps, 200);
  EXPECT_EQ(engine.report().bytes_kept, decoder->cache().bytes_for_uniform_length(32));
}

TEST(EvictionEngine, DecodeEveryNStepsWithSlack) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 5);
  const test::HandPolicy cur = test::current_attention_policy(4, 4, 2);
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(cur, c, {Budget::parse("32"), 0});
  const auto t = tokens(64, 6);
  int next = greedy(decoder->forward(std::span<const int>(t), &engine));
  int max_len = 0, evictions = 0, prev = 32;
  for (int step = 1; step <= 200; ++step) {
    next = greedy(decoder->forward(std::span<const int>(&next, 1), &engine));
    const int len = decoder->cache().length(0, 0);
    max_len = std::max(max_len, len);
    if (len < prev) {
      ++evictions;
      EXPECT_EQ(step % 4, 0) << "evicted off schedule";
      EXPECT_EQ(len, 32);
    }
    prev = len;
  }
  EXPECT_LE(max_len, 32 + 2 + 4);  // budget + slack + at most (every - 1) steps of growth past it
  EXPECT_EQ(evictions, 200 / 4 - 0);  // from step 4 on, every scheduled step finds 36 > 34
}

TEST(EvictionEngine, ReplayFromRecorderEqualsLiveOneShot) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 7);
  const auto t = tokens(150, 8);
  for (const test::HandPolicy& policy :
       {test::snap_policy(8, 5, false, false), test::h2o_policy(8, 0, 0), test::nacl_policy(8, 4, 8, 0.5, 1.0)}) {
    const EvictionReport live = run_prefill(*model, policy, "30", 150, 11);
    auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
    PrefillRecorder rec(16, true);
    const auto t2 = tokens(150, 5);
    decoder->forward(std::span<const int>(t2), &rec);
    KVCache copy = decoder->cache();
    EvictionEngine engine(policy, c, {Budget::parse("30"), 11});
    engine.apply_after_prefill(rec, copy);
    const EvictionReport& replay = engine.report();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        EXPECT_EQ(replay.layers[l][h].kept_positions, live.layers[l][h].kept_positions)
            << policy.desc.name << " layer " << l << " head " << h;
    EXPECT_EQ(replay.bytes_kept, live.bytes_kept);
  }
}

TEST(EvictionEngine, RecorderWithTooSmallWindowIsRejected) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 7);
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder rec(4, false);
  const auto t = tokens(40, 5);
  decoder->forward(std::span<const int>(t), &rec);
  const test::HandPolicy snap = test::snap_policy(8, 5, false, false);
  EvictionEngine engine(snap, c, {Budget::parse("20"), 0});
  EXPECT_THROW(engine.apply_after_prefill(rec, decoder->cache()), std::invalid_argument);
}

TEST(EvictionEngine, CodebookStageReconstructsFromCodesAndCountsBytes) {
  const ModelConfig c = engine_config();
  const auto model = make_random_model(c, 9);
  test::HandPolicy p = test::knorm_policy();
  p.desc.merge.enabled = true;
  p.desc.merge.theta_key = 0.6;
  p.desc.merge.theta_value = 0.6;
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(p, c, {Budget::parse("50%"), 0});
  const auto t = tokens(100, 2);
  decoder->forward(std::span<const int>(t), &engine);
  const EvictionReport& r = engine.report();
  ASSERT_EQ(r.codebook_tokens, decoder->cache().total_entries());
  EXPECT_GT(r.key_codes, 0);
  EXPECT_LT(r.key_codes, r.codebook_tokens);
  EXPECT_LT(r.value_codes, r.codebook_tokens);
  const size_t expected = (r.key_codes + r.value_codes) * c.head_dim * sizeof(float) +
                          r.codebook_tokens * (2 * (sizeof(int32_t) + sizeof(float)) + sizeof(int32_t));
  EXPECT_EQ(r.bytes_codebook, expected);
  // Distinct pre-RoPE key directions left in the cache == codes reported.
  int64_t directions = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const auto k = decoder->cache().keys_pre_rope(l, h);
      const int T = decoder->cache().length(l, h);
      std::vector<std::vector<double>> seen;
      for (int i = 0; i < T; ++i) {
        std::vector<double> u(c.head_dim);
        double n = 0;
        for (int e = 0; e < c.head_dim; ++e) n += k[i * c.head_dim + e] * k[i * c.head_dim + e];
        for (int e = 0; e < c.head_dim; ++e) u[e] = k[i * c.head_dim + e] / std::sqrt(n);
        bool found = false;
        for (const auto& s : seen) {
          double dot = 0;
          for (int e = 0; e < c.head_dim; ++e) dot += s[e] * u[e];
          found |= dot > 1 - 1e-4;
        }
        if (!found) seen.push_back(u);
      }
      directions += static_cast<int64_t>(seen.size());
    }
  EXPECT_EQ(directions, r.key_codes);
  int next = 1;
  EXPECT_NO_THROW(decoder->forward(std::span<const int>(&next, 1), &engine));  // decoding continues
}

TEST(EvictionEngine, BadPolicyParametersAreUsageErrors) {
  const ModelConfig c = engine_config();
  test::HandPolicy p = test::knorm_policy();
  p.desc.window = -3;
  EXPECT_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}), UsageError);
  p = test::nacl_policy(4, 1, 1, 1.5, 1.0);
  EXPECT_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}), UsageError);
  p = test::nacl_policy(4, 1, 1, 0.5, 0.0);
  EXPECT_THROW(EvictionEngine(p, c, {Budget::parse("10"), 0}), UsageError);
}

}  // namespace
}  // namespace kvevict
