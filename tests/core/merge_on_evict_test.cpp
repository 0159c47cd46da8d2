// Merge-on-evict (core/engine/merge_on_evict.h): hand-built heads with expected numbers worked out
// by hand from the methods' formulas; F16 caches; the engine's prefill and decode eviction points
// on stories260K against the independent double reference of reference_merge.cpp, recomputed from
// what each head held before the engine acted (the shipped policies/field files and a decode-time
// policy written here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "core/engine/merge_on_evict.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "hand_policies.h"
#include "policy_test_prompt.h"
#include "reference_merge.h"
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

// Five entries of head_dim 2 (keys, values as stored; positions 0..4):
//   0: k (1, 0)  v (2, 0)      1: k (0, 1)  v (0, 4)          kept
//   2: k (1, 1)  v (2, 2)      cos 1/sqrt2 with both kept keys: a tie, first in kept order
//   3: k (3, 0)  v (0, 6)      cos 1 with entry 0
//   4: k (-1, 2) v (1, 1)      cos 2/sqrt5 with entry 1, -1/sqrt5 with entry 0
const float kKeys[5][2] = {{1, 0}, {0, 1}, {1, 1}, {3, 0}, {-1, 2}};
const float kValues[5][2] = {{2, 0}, {0, 4}, {2, 2}, {0, 6}, {1, 1}};

KVCache five_entries(KvType type) {
  KVCache cache(tiny_config(2), type);
  for (int t = 0; t < 5; ++t) cache.append(0, 0, t, kKeys[t], kValues[t]);
  return cache;
}

PolicyMerge merge_of(MergeMethod m, double threshold = -1.0) {
  PolicyMerge p;
  p.enabled = true;
  p.method = m;
  p.similarity_threshold = threshold;
  return p;
}

std::vector<float> row(const KVCache& cache, int t, bool key) {
  std::vector<float> out(cache.head_dim());
  key ? cache.reconstruct_keys(0, 0, t, t + 1, out.data()) : cache.reconstruct_values(0, 0, t, t + 1, out.data());
  return out;
}

void expect_row(const KVCache& cache, int t, bool key, std::vector<double> want, double tol, const char* what) {
  const std::vector<float> got = row(cache, t, key);
  ASSERT_EQ(got.size(), want.size());
  for (size_t c = 0; c < want.size(); ++c)
    EXPECT_NEAR(got[c], want[c], tol) << what << (key ? " key" : " value") << " of entry " << t << " dim " << c;
}

TEST(MergeOnEvict, PivotAveragesIntoTheMostSimilarKey) {
  KVCache cache = five_entries(KvType::F32);
  const std::vector<int> kept = {0, 1};
  const MergeOnEvictCounts n = merge_on_evict(merge_of(MergeMethod::Pivot), cache, 0, 0, kept);
  EXPECT_EQ(n.evicted, 3);
  EXPECT_EQ(n.merged, 3);
  // Entry 0 takes 2 (tie, first kept) and 3: x0 <- (x0 + (x2 + x0)/2 + (x3 + x0)/2) / 3.
  expect_row(cache, 0, true, {4.0 / 3, 1.0 / 6}, 1e-6, "pivot");
  expect_row(cache, 0, false, {5.0 / 3, 4.0 / 3}, 1e-6, "pivot");
  // Entry 1 takes 4: x1 <- (x1 + (x4 + x1)/2) / 2.
  expect_row(cache, 1, true, {-0.25, 1.25}, 1e-6, "pivot");
  expect_row(cache, 1, false, {0.25, 3.25}, 1e-6, "pivot");
  // Evicted rows are left for the compaction; positions never change.
  expect_row(cache, 3, true, {3, 0}, 0, "pivot");
  EXPECT_EQ(cache.positions(0, 0)[0], 0);
}

TEST(MergeOnEvict, TiesGoToTheFirstInKeptOrder) {
  KVCache cache = five_entries(KvType::F32);
  merge_on_evict(merge_of(MergeMethod::Pivot), cache, 0, 0, std::vector<int>{1, 0});
  // Entry 1 now takes 2 and 4, entry 0 takes 3.
  expect_row(cache, 1, true, {(0 + 0.5 * ((1 - 1) + 2 * 0)) / 3, (1 + 0.5 * ((1 + 2) + 2 * 1)) / 3}, 1e-6, "tie");
  expect_row(cache, 0, true, {(1 + 0.5 * (3 + 1)) / 2, 0}, 1e-6, "tie");
}

TEST(MergeOnEvict, WeightedScattersWithHalfShiftedCosine) {
  KVCache cache = five_entries(KvType::F32);
  merge_on_evict(merge_of(MergeMethod::Weighted), cache, 0, 0, std::vector<int>{0, 1});
  const double w2 = (1 + 1 / std::sqrt(2.0)) / 2, w3 = 1.0, w4 = (1 + 2 / std::sqrt(5.0)) / 2;
  const double s0 = 1 + w2 + w3, s1 = 1 + w4;
  expect_row(cache, 0, true, {(1 + w2 * 1 + w3 * 3) / s0, (0 + w2 * 1) / s0}, 1e-6, "weighted");
  expect_row(cache, 0, false, {(2 + w2 * 2) / s0, (w2 * 2 + w3 * 6) / s0}, 1e-6, "weighted");
  expect_row(cache, 1, true, {(-w4) / s1, (1 + 2 * w4) / s1}, 1e-6, "weighted");
  expect_row(cache, 1, false, {(w4) / s1, (4 + w4) / s1}, 1e-6, "weighted");
}

TEST(MergeOnEvict, NearestFoldsValuesOnlyWithNormWeights) {
  KVCache cache = five_entries(KvType::F32);
  merge_on_evict(merge_of(MergeMethod::Nearest, 0.0), cache, 0, 0, std::vector<int>{0, 1});
  const double w2 = (1 / std::sqrt(2.0)) * std::sqrt(8.0) / (std::sqrt(8.0) + 2 + 1e-6);
  const double w3 = 1.0 * 6 / (6 + 2 + 1e-6);
  const double w4 = (2 / std::sqrt(5.0)) * std::sqrt(2.0) / (std::sqrt(2.0) + 4 + 1e-6);
  expect_row(cache, 0, true, {1, 0}, 0, "nearest");  // keys are never merged
  expect_row(cache, 1, true, {0, 1}, 0, "nearest");
  expect_row(cache, 0, false, {(2 + w2 * 2) / (1 + w2 + w3), (w2 * 2 + w3 * 6) / (1 + w2 + w3)}, 1e-6, "nearest");
  expect_row(cache, 1, false, {w4 / (1 + w4), (4 + w4) / (1 + w4)}, 1e-6, "nearest");
}

TEST(MergeOnEvict, TheThresholdGatesEachEvictedEntry) {
  KVCache cache = five_entries(KvType::F32);
  // 0.9: only entry 3 (cos 1) merges; 2 (0.707) and 4 (0.894) are dropped unmerged.
  const MergeOnEvictCounts n = merge_on_evict(merge_of(MergeMethod::Nearest, 0.9), cache, 0, 0, std::vector<int>{0, 1});
  EXPECT_EQ(n.merged, 1);
  const double w3 = 6 / (6 + 2 + 1e-6);
  expect_row(cache, 0, false, {2 / (1 + w3), w3 * 6 / (1 + w3)}, 1e-6, "threshold");
  expect_row(cache, 1, false, {0, 4}, 0, "threshold");
  // Nearest with a zero weight (an orthogonal key, threshold -1) leaves the target as it was.
  KVCache other = five_entries(KvType::F32);
  merge_on_evict(merge_of(MergeMethod::Nearest, -1.0), other, 0, 0, std::vector<int>{1});  // 3: cos 0 with entry 1
  const double w2 = (1 / std::sqrt(2.0)) * std::sqrt(8.0) / (std::sqrt(8.0) + 4 + 1e-6);
  const double w4 = (2 / std::sqrt(5.0)) * std::sqrt(2.0) / (std::sqrt(2.0) + 4 + 1e-6);
  expect_row(other, 1, false, {(w2 * 2 + w4) / (1 + w2 + w4), (4 + w2 * 2 + w4) / (1 + w2 + w4)}, 1e-6,
             "zero weight");
}

TEST(MergeOnEvict, NothingEvictedOrNothingKeptIsANoOp) {
  for (const std::vector<int>& kept : {std::vector<int>{0, 1, 2, 3, 4}, std::vector<int>{}}) {
    KVCache cache = five_entries(KvType::F32);
    merge_on_evict(merge_of(MergeMethod::Weighted), cache, 0, 0, kept);
    for (int t = 0; t < 5; ++t) expect_row(cache, t, false, {kValues[t][0], kValues[t][1]}, 0, "no-op");
  }
}

TEST(MergeOnEvict, BadCallsThrow) {
  KVCache cache = five_entries(KvType::F32);
  EXPECT_THROW(merge_on_evict(merge_of(MergeMethod::Codebook), cache, 0, 0, std::vector<int>{0}), std::logic_error);
  EXPECT_THROW(merge_on_evict(merge_of(MergeMethod::Pivot), cache, 0, 0, std::vector<int>{0, 5}), std::invalid_argument);
  EXPECT_THROW(merge_on_evict(merge_of(MergeMethod::Pivot), cache, 0, 0, std::vector<int>{1, 1}), std::invalid_argument);
  EXPECT_THROW(cache.write_entry(0, 0, 5, kKeys[0], kValues[0]), std::invalid_argument);
}

// Random heads (head_dim 8, 40 entries, a random kept subset in random order), every method, F32
// and F16 / BF16 caches: the stage equals the double reference run on the rows the cache held.
TEST(MergeOnEvict, RandomHeadsMatchTheReferenceForEveryKvType) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (MergeMethod m : {MergeMethod::Nearest, MergeMethod::Pivot, MergeMethod::Weighted}) {
      const int d = 8, T = 40;
      KVCache cache(tiny_config(d), type);
      for (int t = 0; t < T; ++t) {
        std::vector<float> k(d), v(d);
        for (auto& x : k) x = normal(rng);
        for (auto& x : v) x = normal(rng);
        cache.append(0, 0, t, k.data(), v.data());
      }
      std::vector<reference::KvEntry> entries(T);
      for (int t = 0; t < T; ++t) {
        const auto k = row(cache, t, true), v = row(cache, t, false);
        entries[t].k.assign(k.begin(), k.end());
        entries[t].v.assign(v.begin(), v.end());
      }
      std::vector<int> order(T);
      for (int t = 0; t < T; ++t) order[t] = t;
      std::shuffle(order.begin(), order.end(), rng);
      const std::vector<int> kept(order.begin(), order.begin() + 12);
      const double threshold = m == MergeMethod::Nearest ? 0.0 : -1.0;
      const auto want = reference::merge_on_evict(m, threshold, entries, kept);
      merge_on_evict(merge_of(m, threshold), cache, 0, 0, kept);
      // One rounding to the stored type: relative 2^-11 (F16) or 2^-8 (BF16).
      const double rel = type == KvType::F32 ? 1e-6 : type == KvType::F16 ? 1e-3 : 8e-3;
      int changed = 0;
      for (size_t j = 0; j < kept.size(); ++j) {
        const auto k = row(cache, kept[j], true), v = row(cache, kept[j], false);
        for (int c = 0; c < d; ++c) {
          EXPECT_NEAR(k[c], want[j].k[c], rel * std::max(1.0, std::abs(want[j].k[c]))) << kv_type_name(type);
          EXPECT_NEAR(v[c], want[j].v[c], rel * std::max(1.0, std::abs(want[j].v[c]))) << kv_type_name(type);
          changed += v[c] != static_cast<float>(entries[kept[j]].v[c]);
        }
      }
      EXPECT_GT(changed, 0) << "the merge changed no value: the test would not see a broken stage";
    }
}

// --- The engine's eviction points on stories260K -------------------------------------------

// Records each layer's heads (keys, values as f32, positions) just before the engine acts on it.
class MergeSpy : public ForwardObserver {
 public:
  MergeSpy(EvictionEngine& engine, const ModelConfig& c) : engine_(engine), c_(c), before_(c.n_layers) {}
  ObservationRequest request() const override { return engine_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    before_[s.layer].assign(cache.n_stored_heads(), {});
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      Head& b = before_[s.layer][h];
      const int T = cache.length(s.layer, h), d = cache.head_dim();
      std::vector<float> k(static_cast<size_t>(T) * d), v(k.size());
      cache.reconstruct_keys(s.layer, h, 0, T, k.data());
      cache.reconstruct_values(s.layer, h, 0, T, v.data());
      b.entries.assign(T, {});
      for (int t = 0; t < T; ++t) {
        b.entries[t].k.assign(k.begin() + t * d, k.begin() + (t + 1) * d);
        b.entries[t].v.assign(v.begin() + t * d, v.begin() + (t + 1) * d);
      }
      b.pos.assign(cache.positions(s.layer, h), cache.positions(s.layer, h) + T);
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }

  struct Head {
    std::vector<reference::KvEntry> entries;
    std::vector<int32_t> pos;
  };
  const Head& before(int layer, int head) const { return before_[layer][head]; }

 private:
  EvictionEngine& engine_;
  const ModelConfig& c_;
  std::vector<std::vector<Head>> before_;
};

struct Tally {
  int evicting = 0;   // head decisions that evicted something
  int changed = 0;    // kept entries whose K or V the merge changed
};

// Every head after a forward against the reference on what it held before: the kept set is what
// the head holds now (in cache order, which is `kept` order), the rest was evicted.
void check_heads(const MergeSpy& spy, const KVCache& cache, MergeMethod m, double threshold, const std::string& what,
                 Tally& tally) {
  const int d = cache.head_dim();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      const MergeSpy::Head& b = spy.before(l, h);
      std::map<int32_t, int> index_of;
      for (size_t t = 0; t < b.pos.size(); ++t) index_of[b.pos[t]] = static_cast<int>(t);
      const int T = cache.length(l, h);
      std::vector<int> kept(T);
      for (int t = 0; t < T; ++t) {
        const auto it = index_of.find(cache.positions(l, h)[t]);
        ASSERT_NE(it, index_of.end()) << what << ": a held position the head did not hold before";
        kept[t] = it->second;
      }
      tally.evicting += T < static_cast<int>(b.pos.size());
      const auto want = reference::merge_on_evict(m, threshold, b.entries, kept);
      std::vector<float> k(static_cast<size_t>(T) * d), v(k.size());
      cache.reconstruct_keys(l, h, 0, T, k.data());
      cache.reconstruct_values(l, h, 0, T, v.data());
      for (int t = 0; t < T; ++t) {
        bool differs = false;
        for (int c = 0; c < d; ++c) {
          const double wk = want[t].k[c], wv = want[t].v[c];
          ASSERT_NEAR(k[t * d + c], wk, 1e-5 * std::max(1.0, std::abs(wk))) << what << " layer " << l << " head " << h;
          ASSERT_NEAR(v[t * d + c], wv, 1e-5 * std::max(1.0, std::abs(wv))) << what << " layer " << l << " head " << h;
          differs |= wv != b.entries[kept[t]].v[c] || wk != b.entries[kept[t]].k[c];
        }
        tally.changed += differs;
      }
    }
}

class MergeOnEvictModel : public ::testing::Test {
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

  // The prompt, then `steps` greedy decode steps; every forward checked.
  static Tally run(const PolicyProgram& policy, const std::string& budget, int steps, const std::string& what) {
    const ModelConfig& c = model_->config;
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(policy, c, {Budget::parse(budget), 0});
    MergeSpy spy(engine, c);
    const PolicyMerge& merge = policy.description().merge;
    Tally tally;
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &spy);
    check_heads(spy, decoder->cache(), merge.method, merge.similarity_threshold, what + " prefill", tally);
    for (int step = 1; step <= steps; ++step) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &spy);
      check_heads(spy, decoder->cache(), merge.method, merge.similarity_threshold, what + " step " + std::to_string(step),
                  tally);
    }
    return tally;
  }

  static Model* model_;
  static std::vector<int> tokens_;
};

Model* MergeOnEvictModel::model_ = nullptr;
std::vector<int> MergeOnEvictModel::tokens_;

TEST_F(MergeOnEvictModel, ShippedFilesMatchTheReferenceAtPrefill) {
  const struct {
    const char* name;
    MergeMethod method;
    double threshold;
  } files[] = {{"merging_press", MergeMethod::Nearest, 0.0},
               {"look_m", MergeMethod::Pivot, -1.0},
               {"kvmerger", MergeMethod::Weighted, -1.0}};
  for (const auto& f : files) {
    const auto policy = load_policy(f.name);
    EXPECT_EQ(policy->description().merge.method, f.method) << f.name;
    EXPECT_EQ(policy->description().merge.similarity_threshold, f.threshold) << f.name;
    const Tally t = run(*policy, "48", 0, f.name);
    EXPECT_GT(t.evicting, 0) << f.name;
    EXPECT_GT(t.changed, 0) << f.name << ": no kept entry changed";
  }
  // A gate of 0.9 changes fewer kept entries than the default 0.
  const Tally gated = run(*load_policy("merging_press", {{"similarity_threshold", "0.9"}}), "48", 0, "gated");
  const Tally open = run(*load_policy("merging_press"), "48", 0, "open");
  EXPECT_LT(gated.changed, open.changed);
  EXPECT_GT(gated.changed, 0);
}

// A decode-time policy (K-norm every 2 steps, a slack of 0) with each method: the engine's decode
// eviction point merges too.
TEST_F(MergeOnEvictModel, DecodeEvictionMergesAsTheReference) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvevict_merge_test";
  std::filesystem::create_directories(dir);
  const std::filesystem::path file = dir / "decode_merge.yaml";
  std::ofstream(file) << "name: decode_merge\nabout: test\nparams:\n"
                         "  method: {enum: [nearest, pivot, weighted], default: pivot}\n"
                         "  threshold: {float: -1, min: -1, max: 1}\n"
                         "protect: {first: 2}\n"
                         "run: {prefill: true, decode_every: 2}\n"
                         "merge: {method: method, similarity_threshold: threshold}\n"
                         "score: |\n  score[t] = -key_norm[t]\n";
  for (const char* m : {"nearest", "pivot", "weighted"}) {
    const auto policy = load_policy(file.string(), {{"method", m}, {"threshold", std::string(m) == "nearest" ? "0" : "-1"}});
    const Tally t = run(*policy, "40", 6, m);
    EXPECT_GT(t.evicting, model_->config.n_layers * model_->config.n_kv_heads) << m << ": no decode eviction";
    EXPECT_GT(t.changed, 0) << m;
  }
  std::filesystem::remove_all(dir);
}

// unfold_gqa evicts outside the engine's per-head keep, so the engine refuses the combination
// (policy files get a file:line:col error first: tests/dsl/merge_settings_test.cpp).
TEST(MergeOnEvictEngine, UnfoldGqaIsRejected) {
  test::HandPolicy p;
  p.desc.name = "hand";
  p.desc.select.unfold_gqa = true;
  p.desc.merge = merge_of(MergeMethod::Pivot);
  p.score_fn = [](const ScoreInputs& in, bool, float* out) { std::fill(out, out + in.T, 0.0f); };
  try {
    EvictionEngine engine(p, tiny_config(2), {Budget::parse("4"), 0});
    ADD_FAILURE() << "accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "policy hand: merge.method pivot cannot be combined with unfold_gqa");
  }
  p.desc.merge.method = MergeMethod::Codebook;  // the codebook does unfold
  EXPECT_NO_THROW(EvictionEngine(p, tiny_config(2), {Budget::parse("4"), 0}));
}

}  // namespace
}  // namespace kvevict
