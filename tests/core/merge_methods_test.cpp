// The merge-on-evict methods beyond the nearest-key rules (merge_on_evict_test.cpp): merge.method
// cam (core/engine/merge_cam.h). Hand-built heads with numbers worked out by hand; random heads on
// F32 / F16 / BF16 caches against the double reference of reference_merge_methods.cpp; and
// policies/field/cam.yaml on stories260K, where every decode-time compression's kept set and merged
// values are recomputed by the reference from what each head held before the engine acted and from
// the reference's own running decode attention (softmax of the recorded decode queries).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>

#include "core/decode/decoder.h"
#include "core/engine/counter_rng.h"
#include "core/engine/engine.h"
#include "core/engine/merge_on_evict.h"
#include "core/engine/window_observation.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "policy_test_prompt.h"
#include "reference_merge_methods.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

ModelConfig tiny_config(int head_dim) {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = head_dim;
  c.dim = c.n_heads * head_dim;
  c.hidden_dim = 8;
  c.vocab_size = 32;
  c.context_length = 64;
  return c;
}

PolicyMerge cam(int merge_budget) {
  PolicyMerge p;
  p.enabled = true;
  p.method = MergeMethod::Cam;
  p.merge_budget = merge_budget;
  return p;
}

std::vector<float> value_of(const KVCache& cache, int t) {
  std::vector<float> out(cache.head_dim());
  cache.reconstruct_values(0, 0, t, t + 1, out.data());
  return out;
}

// A head of T entries at positions 0..T-1 with value rows `values` and keys (1, 0, ...).
KVCache head_with(const std::vector<std::vector<float>>& values, KvType type = KvType::F32) {
  const int d = static_cast<int>(values.at(0).size());
  KVCache cache(tiny_config(d), type);
  std::vector<float> k(d, 0.0f);
  k[0] = 1;
  for (size_t t = 0; t < values.size(); ++t) cache.append(0, 0, static_cast<int>(t), k.data(), values[t].data());
  return cache;
}

struct Context {
  std::vector<float> scores;
  std::vector<float> attention;
  std::vector<int32_t> pos;
  MergeContext make(int new_entries, uint64_t seed = 0) const {
    MergeContext c;
    c.scores = scores;
    c.attention = attention;
    c.positions = pos;
    c.new_entries = new_entries;
    c.seed = seed;
    return c;
  }
};

// Seven entries, kept {0, 2, 3, 6}, merge_budget 2, two new tokens: the candidates are the two
// best-scored evicted entries, 5 (score 9) and 1 (score 5); 4 (score 3) is dropped unmerged.
// Entry 1's window is kept 2 and 3 (v / 2 each); entry 5's is kept 6 alone (the window is clipped
// at the last kept entry: v / 1). Every candidate's attention is 10x its window's mean: p = 1.
TEST(MergeCam, SpreadsEachCandidateOverTheNextKeptEntries) {
  const std::vector<std::vector<float>> v = {{1, 0}, {4, 2}, {0, 1}, {2, 2}, {8, 8}, {6, -6}, {1, 1}};
  KVCache cache = head_with(v);
  const Context ctx{{0, 5, 0, 0, 3, 9, 0}, {1, 10, 1, 1, 10, 10, 1}, {0, 1, 2, 3, 4, 5, 6}};
  const MergeOnEvictCounts n = merge_on_evict(cam(2), cache, 0, 0, std::vector<int>{6, 0, 3, 2}, ctx.make(2));
  EXPECT_EQ(n.evicted, 3);
  EXPECT_EQ(n.merged, 2);
  EXPECT_EQ(value_of(cache, 0), (std::vector<float>{1, 0}));
  EXPECT_EQ(value_of(cache, 2), (std::vector<float>{2, 2}));   // (0, 1) + (4, 2) / 2
  EXPECT_EQ(value_of(cache, 3), (std::vector<float>{4, 3}));   // (2, 2) + (4, 2) / 2
  EXPECT_EQ(value_of(cache, 6), (std::vector<float>{7, -5}));  // (1, 1) + (6, -6)
  // Three new tokens make entry 4 a candidate too: window kept 6 (clipped), v6 gets (8, 8) as well.
  KVCache more = head_with(v);
  merge_on_evict(cam(2), more, 0, 0, std::vector<int>{0, 2, 3, 6}, ctx.make(3));
  EXPECT_EQ(value_of(more, 6), (std::vector<float>{15, 3}));
  // No new token, no candidate.
  KVCache none = head_with(v);
  EXPECT_EQ(merge_on_evict(cam(2), none, 0, 0, std::vector<int>{0, 2, 3, 6}, ctx.make(0)).merged, 0);
  EXPECT_EQ(value_of(none, 6), (std::vector<float>{1, 1}));
}

TEST(MergeCam, ScoreTiesGoToTheLaterEntry) {
  const std::vector<std::vector<float>> v = {{1, 0}, {2, 0}, {4, 0}, {0, 0}};
  KVCache cache = head_with(v);
  const Context ctx{{0, 7, 7, 0}, {1, 5, 5, 1}, {0, 1, 2, 3}};
  merge_on_evict(cam(1), cache, 0, 0, std::vector<int>{0, 3}, ctx.make(1));
  EXPECT_EQ(value_of(cache, 3), (std::vector<float>{4, 0})) << "entry 2 (the later of the tie) merges, not 1";
}

// p = A_e / window mean, clamped; a 0 / 0 ratio is 0 and x / 0 is 1. The draw is the documented
// counter_uniform(seed, layer, head, position, kMergeStream) < p.
TEST(MergeCam, TheBernoulliGateIsTheDocumentedDraw) {
  const std::vector<std::vector<float>> v = {{1, 0}, {0, 0}};
  int merged = 0, skipped = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    KVCache cache = head_with({{2, 0}, {1, 0}});
    const Context ctx{{0, 0}, {1, 2}, {17, 5}};  // entry 0 (position 17) evicted: p = 1 / 2
    merge_on_evict(cam(4), cache, 0, 0, std::vector<int>{1}, ctx.make(1, seed));
    const bool want = counter_uniform(seed, 0, 0, 17, kMergeStream) < 0.5f;
    EXPECT_EQ(value_of(cache, 1)[0], want ? 3.0f : 1.0f) << "seed " << seed;
    (want ? merged : skipped) += 1;
  }
  EXPECT_GT(merged, 5);
  EXPECT_GT(skipped, 5);
  for (const auto& [attention, want] : std::vector<std::pair<std::vector<float>, float>>{
           {{0, 0}, 1.0f},     // 0 / 0: never
           {{3, 0}, 3.0f},     // x / 0: always
           {{0, 5}, 1.0f},     // 0: never
           {{50, 1}, 3.0f}}) { // clamped to 1: always
    KVCache cache = head_with({{2, 0}, {1, 0}});
    const Context ctx{{0, 0}, attention, {17, 5}};
    merge_on_evict(cam(4), cache, 0, 0, std::vector<int>{1}, ctx.make(1, 3));
    EXPECT_EQ(value_of(cache, 1)[0], want) << attention[0] << " / " << attention[1];
  }
}

TEST(MergeCam, AContextOfAnotherLengthIsAnEngineBug) {
  KVCache cache = head_with({{2, 0}, {1, 0}});
  const Context ctx{{0}, {1, 2}, {0, 1}};
  EXPECT_THROW(merge_on_evict(cam(4), cache, 0, 0, std::vector<int>{1}, ctx.make(1)), std::logic_error);
  EXPECT_THROW(merge_on_evict(cam(4), cache, 0, 0, std::vector<int>{1}, MergeContext{}), std::logic_error);
}

// Random heads: random scores, attention and kept sets; merge budgets 1, 3 and 50 (wider than
// the kept set); the stage equals the reference for every KvType.
TEST(MergeCam, RandomHeadsMatchTheReferenceForEveryKvType) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int budget : {1, 3, 50}) {
      const int d = 8, T = 60;
      std::vector<std::vector<float>> v(T, std::vector<float>(d));
      for (auto& r : v)
        for (auto& x : r) x = normal(rng);
      KVCache cache = head_with(v, type);
      Context ctx;
      for (int t = 0; t < T; ++t) {
        ctx.scores.push_back(normal(rng));
        ctx.attention.push_back(unit(rng));
        ctx.pos.push_back(3 * t + 1);
      }
      reference::Rows held(T);
      for (int t = 0; t < T; ++t) {
        const auto r = value_of(cache, t);
        held[t].assign(r.begin(), r.end());
      }
      std::vector<int> order(T);
      for (int t = 0; t < T; ++t) order[t] = t;
      std::shuffle(order.begin(), order.end(), rng);
      const std::vector<int> kept(order.begin(), order.begin() + 20);
      const uint64_t seed = 99;
      int candidates = 0, merged = 0;
      const auto want = reference::cam_merge(
          held, std::vector<double>(ctx.attention.begin(), ctx.attention.end()),
          std::vector<double>(ctx.scores.begin(), ctx.scores.end()), kept, 25, budget,
          [&](int e) { return counter_uniform(seed, 0, 0, ctx.pos[e], kMergeStream); }, candidates, merged);
      const MergeOnEvictCounts n = merge_on_evict(cam(budget), cache, 0, 0, kept, ctx.make(25, seed));
      EXPECT_EQ(n.merged, merged);
      EXPECT_GT(merged, 0);
      EXPECT_LT(merged, candidates) << "every draw merged: the gate is not exercised";
      const double rel = type == KvType::F32 ? 1e-6 : type == KvType::F16 ? 1e-3 : 8e-3;
      int changed = 0;
      for (int j : kept) {
        const auto got = value_of(cache, j);
        for (int c = 0; c < d; ++c) {
          EXPECT_NEAR(got[c], want[j][c], rel * std::max(1.0, std::abs(want[j][c]))) << kv_type_name(type) << " " << budget;
          changed += want[j][c] != held[j][c];
        }
      }
      EXPECT_GT(changed, 0);
    }
}

// --- policies/field/cam.yaml on stories260K -------------------------------------------------

// Records, before the engine acts on a layer, what its heads hold (keys, values, positions) and
// the forward's newest query row; asks the decoder for at least that one row.
class CamSpy : public ForwardObserver {
 public:
  struct Head {
    reference::Rows keys, values;
    std::vector<int32_t> pos;
  };
  CamSpy(EvictionEngine& engine, const ModelConfig& c) : engine_(engine), c_(c), before_(c.n_layers), query_(c.n_layers) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    r.window = std::max(r.window, 1);
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    const int d = c_.head_dim;
    query_[s.layer].assign(c_.n_heads, std::vector<double>(d));
    const size_t last = static_cast<size_t>(s.window - 1) * c_.n_heads * d;
    for (int h = 0; h < c_.n_heads; ++h)
      for (int x = 0; x < d; ++x) query_[s.layer][h][x] = s.window_queries[last + static_cast<size_t>(h) * d + x];
    before_[s.layer].assign(cache.n_stored_heads(), {});
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      Head& b = before_[s.layer][h];
      const int T = cache.length(s.layer, h);
      std::vector<float> k(static_cast<size_t>(T) * d), v(k.size());
      cache.reconstruct_keys(s.layer, h, 0, T, k.data());
      cache.reconstruct_values(s.layer, h, 0, T, v.data());
      b.keys.assign(T, {});
      b.values.assign(T, {});
      for (int t = 0; t < T; ++t) {
        b.keys[t].assign(k.begin() + t * d, k.begin() + (t + 1) * d);
        b.values[t].assign(v.begin() + t * d, v.begin() + (t + 1) * d);
      }
      b.pos.assign(cache.positions(s.layer, h), cache.positions(s.layer, h) + T);
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }
  const Head& before(int layer, int head) const { return before_[layer][head]; }
  const reference::Rows& query(int layer) const { return query_[layer]; }

 private:
  EvictionEngine& engine_;
  const ModelConfig& c_;
  std::vector<std::vector<Head>> before_;
  std::vector<reference::Rows> query_;  // [layer][query head][d]
};

struct CamTally {
  int compressions = 0, candidates = 0, merged = 0;
};

class CamModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }

  // The prompt (never compressed), then `steps` greedy decode steps; after every decode forward
  // each layer is compared with the reference: CAMPress compresses a layer when its step count
  // reaches `interval` and it holds more than the budget, with the count of steps since its last
  // compression as the number of merge candidates.
  static void run(int interval, int merge_budget, int budget, int steps, uint64_t seed, CamTally& tally) {
    const ModelConfig& c = model_->config;
    const int L = c.n_layers, Hkv = c.n_kv_heads, G = c.group_size();
    const auto policy = load_policy("cam", {{"compression_interval", std::to_string(interval)},
                                            {"merge_budget", std::to_string(merge_budget)}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, c, {Budget::parse(std::to_string(budget)), seed});
    CamSpy spy(engine, c);
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &spy);
    EXPECT_GT(static_cast<int>(tokens_.size()), budget) << "the prompt must exceed the budget";
    std::vector<std::vector<std::map<int32_t, double>>> attention(L, std::vector<std::map<int32_t, double>>(Hkv));
    std::vector<int> since(L, 0);
    for (int step = 1; step <= steps; ++step) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &spy);
      const KVCache& cache = decoder->cache();
      for (int l = 0; l < L; ++l) {
        const std::string what = "step " + std::to_string(step) + " layer " + std::to_string(l);
        ++since[l];
        std::vector<reference::Rows> keys(Hkv);
        std::vector<std::vector<double>> att(Hkv);
        for (int h = 0; h < Hkv; ++h) {
          const CamSpy::Head& b = spy.before(l, h);
          const reference::Rows group(spy.query(l).begin() + h * G, spy.query(l).begin() + (h + 1) * G);
          const std::vector<double> a = reference::group_attention(group, b.keys);
          for (size_t t = 0; t < b.pos.size(); ++t) att[h].push_back(attention[l][h][b.pos[t]] += a[t]);
          keys[h] = b.keys;
          ASSERT_EQ(b.pos, spy.before(l, 0).pos) << what << ": layer-shared heads hold the same positions";
        }
        const CamSpy::Head& b0 = spy.before(l, 0);
        const int T = static_cast<int>(b0.pos.size());
        const bool compress = step % interval == 0 && T > budget;
        std::vector<int> kept(T);
        for (int t = 0; t < T; ++t) kept[t] = t;
        if (compress) kept = reference::cam_knorm_kept(keys, budget);
        const std::vector<double> scores = reference::cam_knorm_scores(keys);  // what the selection ranked
        for (int h = 0; h < Hkv; ++h) {
          const CamSpy::Head& b = spy.before(l, h);
          reference::Rows want = b.values;
          if (compress)
            want = reference::cam_merge(
                b.values, att[h], scores, kept, since[l], merge_budget,
                [&](int e) {
                  return counter_uniform(sampling_seed_for_step(seed, step), l, h, b.pos[e], kMergeStream);
                },
                tally.candidates, tally.merged);
          ASSERT_EQ(cache.length(l, h), static_cast<int>(kept.size())) << what << " head " << h;
          std::vector<float> v(static_cast<size_t>(kept.size()) * c.head_dim);
          cache.reconstruct_values(l, h, 0, static_cast<int>(kept.size()), v.data());
          for (size_t j = 0; j < kept.size(); ++j) {
            ASSERT_EQ(cache.positions(l, h)[j], b.pos[kept[j]]) << what << " head " << h << ": kept set";
            for (int x = 0; x < c.head_dim; ++x) {
              const double w = want[kept[j]][x];
              ASSERT_NEAR(v[j * c.head_dim + x], w, 1e-5 * std::max(1.0, std::abs(w))) << what << " head " << h;
            }
          }
          std::map<int32_t, double> pruned;  // the running attention follows the kept entries
          for (int j : kept) pruned[b.pos[j]] = attention[l][h][b.pos[j]];
          attention[l][h].swap(pruned);
        }
        if (compress) {
          ++tally.compressions;
          since[l] = 0;
        }
      }
    }
  }

  static Model* model_;
  static std::vector<int> tokens_;
};

Model* CamModel::model_ = nullptr;
std::vector<int> CamModel::tokens_;

TEST_F(CamModel, EveryCompressionMatchesTheReference) {
  const auto policy = load_policy("cam");
  EXPECT_EQ(policy->description().merge.method, MergeMethod::Cam);
  EXPECT_EQ(policy->description().merge.merge_budget, 32) << "kvpress's default";
  EXPECT_FALSE(policy->description().run.at_prefill);
  EXPECT_EQ(policy->description().select.scope, SelectScope::LayerShared);
  const int L = model_->config.n_layers;
  for (const auto& [interval, merge_budget] : std::vector<std::pair<int, int>>{{3, 4}, {4, 32}}) {
    CamTally t;
    run(interval, merge_budget, 96, 12, 5, t);
    if (HasFatalFailure()) return;
    const std::string what = "interval " + std::to_string(interval) + " merge_budget " + std::to_string(merge_budget);
    EXPECT_EQ(t.compressions, L * (12 / interval)) << what;
    EXPECT_GT(t.merged, 0) << what;
    EXPECT_LT(t.merged, t.candidates) << what << ": every candidate merged, the gate is not exercised";
  }
}

// The draw is a pure function of the seed: the same seed gives the same cache, another one other merges.
TEST_F(CamModel, RunsAreReproducibleAndTheSeedMatters) {
  const auto policy = load_policy("cam", {{"compression_interval", "3"}, {"merge_budget", "4"}});
  auto values_after = [&](uint64_t seed) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, model_->config, {Budget::parse("96"), seed});
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
    for (int step = 1; step <= 6; ++step) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
    }
    const KVCache& cache = decoder->cache();
    std::vector<float> all;
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_stored_heads(); ++h) {
        std::vector<float> v(static_cast<size_t>(cache.length(l, h)) * cache.head_dim());
        cache.reconstruct_values(l, h, 0, cache.length(l, h), v.data());
        all.insert(all.end(), v.begin(), v.end());
      }
    return all;
  };
  EXPECT_EQ(values_after(1), values_after(1));
  EXPECT_NE(values_after(1), values_after(2));
}

// --- merge.method d2o ------------------------------------------------------------------------

std::vector<float> key_of(const KVCache& cache, int head, int t) {
  std::vector<float> out(cache.head_dim());
  cache.reconstruct_keys(0, head, t, t + 1, out.data());
  return out;
}

// One head of five entries (tiny_config: one stored head). kept {0, 1}; cosines: entry 2 -> 0 at
// 1/sqrt2 (tie, first kept), 3 -> 0 at 1, 4 -> 1 at 2/sqrt5. First eviction: tau = their mean
// 0.8340; 3 (1.0) and 4 (0.894) merge, 2 (0.707) does not.
TEST(MergeD2o, TheFirstThresholdIsTheMeanAndWeightsAreTheCosines) {
  const float keys[5][2] = {{1, 0}, {0, 1}, {1, 1}, {3, 0}, {-1, 2}};
  const float values[5][2] = {{2, 0}, {0, 4}, {2, 2}, {0, 6}, {1, 1}};
  KVCache cache(tiny_config(2), KvType::F32);
  for (int t = 0; t < 5; ++t) cache.append(0, 0, t, keys[t], values[t]);
  PolicyMerge m;
  m.enabled = true;
  m.method = MergeMethod::D2o;
  m.ema_alpha = 0.25;
  m.ema_beta = 0.5;
  D2oThreshold tau;
  const double c2 = 1 / std::sqrt(2.0), c4 = 2 / std::sqrt(5.0);
  const MergeOnEvictCounts n = merge_on_evict_layer(m, cache, 0, {{0, 1}}, tau);
  EXPECT_TRUE(tau.set);
  EXPECT_NEAR(tau.value, (c2 + 1 + c4) / 3, 1e-12);
  EXPECT_EQ(n.evicted, 3);
  EXPECT_EQ(n.merged, 2);
  auto near = [](const std::vector<float>& got, std::vector<double> want) {
    for (size_t c = 0; c < want.size(); ++c) EXPECT_NEAR(got[c], want[c], 1e-6) << c;
  };
  near(key_of(cache, 0, 0), {(1 + 1.0 * 3) / 2, 0});  // (x0 + 1 * x3) / 2
  near(value_of(cache, 0), {2.0 / 2, 6.0 / 2});
  near(key_of(cache, 0, 1), {(0 - c4) / 2, (1 + 2 * c4) / 2});
  near(value_of(cache, 1), {c4 / 2, (4 + c4) / 2});
  // The second eviction of the layer: tau = 0.25 tau + 0.5 m. Keep {0}: entries 1..4 have cosines
  // 0, 1/sqrt2, 1, -1/sqrt5 with entry 0 (as the cache now holds it: merged rows included).
  const std::vector<float> k0 = key_of(cache, 0, 0), k1 = key_of(cache, 0, 1);
  auto cos = [](const std::vector<float>& a, const float* b) {
    const double ab = a[0] * b[0] + a[1] * b[1], na = std::hypot(a[0], a[1]), nb = std::hypot(b[0], b[1]);
    return ab / (na * nb);
  };
  const double m2 = (cos(k1, k0.data()) + cos(std::vector<float>{1, 1}, k0.data()) + 1.0 +
                     cos(std::vector<float>{-1, 2}, k0.data())) / 4;
  const double before = tau.value;
  merge_on_evict_layer(m, cache, 0, {{0}}, tau);
  EXPECT_NEAR(tau.value, 0.25 * before + 0.5 * m2, 1e-6);
  // Nothing evicted: the threshold stays.
  const double kept_tau = tau.value;
  KVCache full(tiny_config(2), KvType::F32);
  full.append(0, 0, 0, keys[0], values[0]);
  EXPECT_EQ(merge_on_evict_layer(m, full, 0, {{0}}, tau).merged, 0);
  EXPECT_EQ(tau.value, kept_tau);
  EXPECT_THROW(merge_on_evict_layer(m, cache, 0, {{0}, {0}}, tau), std::invalid_argument);
  EXPECT_THROW(merge_on_evict(m, cache, 0, 0, std::vector<int>{0}), std::logic_error) << "a layer-level rule";
}

// policies/field/d2o.yaml at the prefill: the kept sets are H2O's with sinks (reference_policies'
// attention, recomputed in double from the recorded queries), the merged rows D2O's.
TEST_F(CamModel, D2oPrefillMatchesTheReference) {
  const ModelConfig& c = model_->config;
  const int S = static_cast<int>(tokens_.size()), budget = 48, sinks = 4, recent = S / 10;
  const reference::PromptData p = reference::collect(*model_, tokens_, S);  // every row: only A_acc is read
  const auto policy = load_policy("d2o");
  EXPECT_EQ(policy->description().merge.method, MergeMethod::D2o);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, c, {Budget::parse(std::to_string(budget)), 0});
  decoder->forward(std::span<const int>(tokens_), &engine);
  const KVCache& cache = decoder->cache();
  int merged = 0, evicted = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    std::vector<reference::HeadRows> heads(c.n_kv_heads);
    std::vector<std::vector<int>> kept(c.n_kv_heads);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const reference::HeadData& hd = p[l][h];
      std::vector<double> acc(S, 0.0);
      for (int g = 0; g < hd.G; ++g)
        for (int t = 0; t < S; ++t) acc[t] += hd.accumulated[static_cast<size_t>(g) * S + t];
      kept[h] = reference::h2o_with_sinks(acc, budget, sinks, recent);
      for (int t = 0; t < S; ++t) {
        heads[h].keys.emplace_back(hd.keys.begin() + t * hd.d, hd.keys.begin() + (t + 1) * hd.d);
        heads[h].values.emplace_back(hd.values.begin() + t * hd.d, hd.values.begin() + (t + 1) * hd.d);
      }
      evicted += S - static_cast<int>(kept[h].size());
    }
    std::optional<double> tau;
    const auto want = reference::d2o_merge(heads, kept, 0.5, 0.5, tau, merged);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      ASSERT_EQ(cache.length(l, h), static_cast<int>(kept[h].size())) << "layer " << l << " head " << h;
      std::vector<float> k(static_cast<size_t>(kept[h].size()) * c.head_dim), v(k.size());
      cache.reconstruct_keys(l, h, 0, cache.length(l, h), k.data());
      cache.reconstruct_values(l, h, 0, cache.length(l, h), v.data());
      for (size_t j = 0; j < kept[h].size(); ++j) {
        ASSERT_EQ(cache.positions(l, h)[j], kept[h][j]) << "layer " << l << " head " << h << ": kept set";
        for (int x = 0; x < c.head_dim; ++x) {
          const double wk = want[h].keys[j][x], wv = want[h].values[j][x];
          ASSERT_NEAR(k[j * c.head_dim + x], wk, 1e-5 * std::max(1.0, std::abs(wk))) << "layer " << l << " head " << h;
          ASSERT_NEAR(v[j * c.head_dim + x], wv, 1e-5 * std::max(1.0, std::abs(wv))) << "layer " << l << " head " << h;
        }
      }
    }
  }
  EXPECT_GT(merged, 0);
  EXPECT_LT(merged, evicted) << "every evicted entry merged: the threshold is not exercised";
}

// d2o.yaml while decoding (one eviction per head and step): each layer's threshold follows the
// EMA over its evictions; the merged rows of every step equal the reference's on what the heads
// held before (kept = what they hold after, in cache order).
TEST_F(CamModel, D2oDecodeThresholdFollowsTheEma) {
  const ModelConfig& c = model_->config;
  const auto policy = load_policy("d2o", {{"alpha", "0.3"}, {"beta", "0.7"}});
  const double alpha = policy->description().merge.ema_alpha, beta = policy->description().merge.ema_beta;
  EXPECT_NEAR(alpha, 0.3, 1e-6);
  EXPECT_NEAR(beta, 0.7, 1e-6);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, c, {Budget::parse("48"), 0});
  CamSpy spy(engine, c);
  std::vector<std::optional<double>> tau(c.n_layers);
  int merged = 0, evictions = 0;
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &spy);
  for (int step = 0; step <= 6; ++step) {
    if (step > 0) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &spy);
    }
    const KVCache& cache = decoder->cache();
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<reference::HeadRows> heads(c.n_kv_heads);
      std::vector<std::vector<int>> kept(c.n_kv_heads);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        const CamSpy::Head& b = spy.before(l, h);
        heads[h] = {b.keys, b.values};
        std::map<int32_t, int> index_of;
        for (size_t t = 0; t < b.pos.size(); ++t) index_of[b.pos[t]] = static_cast<int>(t);
        for (int t = 0; t < cache.length(l, h); ++t) {
          const auto it = index_of.find(cache.positions(l, h)[t]);
          ASSERT_NE(it, index_of.end());
          kept[h].push_back(it->second);
        }
        ASSERT_EQ(cache.length(l, h), 48) << "step " << step;
        evictions += cache.length(l, h) < static_cast<int>(b.pos.size());
      }
      const auto want = reference::d2o_merge(heads, kept, alpha, beta, tau[l], merged);
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<float> k(static_cast<size_t>(kept[h].size()) * c.head_dim), v(k.size());
        cache.reconstruct_keys(l, h, 0, cache.length(l, h), k.data());
        cache.reconstruct_values(l, h, 0, cache.length(l, h), v.data());
        for (size_t j = 0; j < kept[h].size(); ++j)
          for (int x = 0; x < c.head_dim; ++x) {
            const double wk = want[h].keys[j][x], wv = want[h].values[j][x];
            ASSERT_NEAR(k[j * c.head_dim + x], wk, 1e-5 * std::max(1.0, std::abs(wk))) << "step " << step << " layer " << l;
            ASSERT_NEAR(v[j * c.head_dim + x], wv, 1e-5 * std::max(1.0, std::abs(wv))) << "step " << step << " layer " << l;
          }
      }
    }
  }
  EXPECT_EQ(evictions, 7 * c.n_layers * c.n_kv_heads) << "the prefill and every step evict in every head";
  EXPECT_GT(merged, 0);
}

// Hand-built descriptions meet the same refusals as policy files (merge_checks.h).
TEST(MergeCamEngine, PrefillEvictionIsRefused) {
  test::HandPolicy p;
  p.desc.name = "hand";
  p.desc.merge = cam(4);
  p.desc.run.decode_every = 2;
  p.score_fn = [](const ScoreInputs& in, bool, float* out) { std::fill(out, out + in.T, 0.0f); };
  try {
    EvictionEngine engine(p, tiny_config(2), {Budget::parse("4"), 0});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("merge.method cam merges at decode-time evictions only"), std::string::npos)
        << e.what();
  }
  p.desc.run.at_prefill = false;
  EXPECT_NO_THROW(EvictionEngine(p, tiny_config(2), {Budget::parse("4"), 0}));
  p.desc.merge.merge_budget = 0;
  EXPECT_THROW(EvictionEngine(p, tiny_config(2), {Budget::parse("4"), 0}), UsageError);
}

}  // namespace
}  // namespace kvevict
