// Kept-set comparison (core/engine/kept_set_comparison.h): the near-tie classification on hand-made
// reports, and its CPU proof on real decoders. Two CPU decoders that differ only in the cache's
// storage type (f16 vs f32: rounding of the same size as the GPU's fp16 GEMMs) run each policy in
// lockstep: their caches may part, but only on near ties; a policy with another parameter on one
// side must be caught as a real difference.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/kept_set_comparison.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#include "dsl/policy_loader.h"
#include "lockstep_eviction.h"

namespace kvevict {
namespace {

// One layer, one head: A ranked positions 0..3 with `scores` and kept `kept_a`; B kept `kept_b`.
EvictionReport one_head(std::vector<int32_t> kept, std::vector<float> scores = {}) {
  EvictionReport r;
  HeadReport h;
  h.kept = static_cast<int>(kept.size());
  h.kept_positions = std::move(kept);
  h.selection_scores = std::move(scores);
  for (size_t i = 0; i < h.selection_scores.size(); ++i) h.selection_positions.push_back(static_cast<int32_t>(i));
  r.layers = {{h}};
  return r;
}

const std::vector<float> kScores = {0.9f, 0.5f, 0.499f, 0.1f};  // band: 1e-2 x 0.9

TEST(KeptSetComparison, IdenticalSetsAreIdentical) {
  const KeptSetComparison c = compare_kept_sets(one_head({0, 1}, kScores), one_head({0, 1}));
  EXPECT_TRUE(c.identical());
  EXPECT_EQ(c.heads_identical, 1);
}

TEST(KeptSetComparison, ASwapAtTheBoundaryIsANearTie) {
  const KeptSetComparison c = compare_kept_sets(one_head({0, 1}, kScores), one_head({0, 2}));
  EXPECT_EQ(c.entries_differing, 2);
  EXPECT_EQ(c.differing_near_ties, 2);
  EXPECT_TRUE(c.only_near_ties());
  EXPECT_TRUE(c.first_real.empty());
}

TEST(KeptSetComparison, KeepingALowScoreIsReal) {
  const KeptSetComparison c = compare_kept_sets(one_head({0, 1}, kScores), one_head({0, 3}));
  EXPECT_EQ(c.entries_differing, 2);
  EXPECT_EQ(c.differing_near_ties, 1);  // dropping 1 (0.5, next to the boundary 0.499) is a near tie
  EXPECT_EQ(c.differing_real(), 1);     // keeping 3 (0.1) is not
  EXPECT_FALSE(c.only_near_ties());
  EXPECT_EQ(c.first_real, "layer 0 head 0 position 3");
}

TEST(KeptSetComparison, UnrankedEntriesAndMovedBudgetsAreNotNearTies) {
  const KeptSetComparison unranked = compare_kept_sets(one_head({0, 1}, kScores), one_head({0, 7}));
  EXPECT_EQ(unranked.differing_unclassified, 1);
  EXPECT_FALSE(unranked.only_near_ties());
  const KeptSetComparison moved = compare_kept_sets(one_head({0, 1}, kScores), one_head({0, 1, 2}));
  EXPECT_EQ(moved.kept_count_shift, 1);
  EXPECT_FALSE(moved.only_near_ties());
}

TEST(KeptSetComparison, SlotOrderIsComparedWhenGiven) {
  const EvictionReport a = one_head({0, 1, 2}, kScores), b = one_head({0, 1, 2});
  const CacheOrder order_a = {{{0, 1, 2}}}, near = {{{0, 2, 1}}}, far = {{{1, 0, 2}}};
  EXPECT_TRUE(compare_kept_sets(a, b).identical());  // sets only
  const KeptSetComparison swapped = compare_kept_sets(a, b, kNearTieScoreTolerance, &order_a, &near);
  EXPECT_EQ(swapped.heads_reordered, 1);
  EXPECT_EQ(swapped.slots_differing, 2);
  EXPECT_TRUE(swapped.only_near_ties());  // 0.5 vs 0.499
  const KeptSetComparison real = compare_kept_sets(a, b, kNearTieScoreTolerance, &order_a, &far);
  EXPECT_EQ(real.slots_real(), 2);  // 0.9 vs 0.5
  EXPECT_EQ(real.first_real, "layer 0 head 0 slot 0");
}

// Two heads ranked jointly (Ada-KV): A kept 0, 1 of head 0 and 0 of head 1; B moved one entry from
// head 0 (position 1, score 0.5) to head 1 (position 1, score 0.499): the layer's boundary (0.499)
// makes it a near tie, and the layer's total budget did not move.
TEST(KeptSetComparison, JointlyRankedHeadsShareTheLayersBoundary) {
  auto joint = [](std::vector<int32_t> kept, std::vector<float> scores) {
    HeadReport h;
    h.kept = static_cast<int>(kept.size());
    h.kept_positions = std::move(kept);
    h.selection_scores = std::move(scores);
    h.selection_positions = {0, 1};
    h.selection_layer_wide = true;
    return h;
  };
  EvictionReport a, b;
  a.layers = {{joint({0, 1}, {0.9f, 0.5f}), joint({0}, {0.8f, 0.499f})}};
  b.layers = {{joint({0}, {}), joint({0, 1}, {})}};
  const KeptSetComparison c = compare_kept_sets(a, b);
  EXPECT_EQ(c.entries_differing, 2);
  EXPECT_EQ(c.differing_near_ties, 2);
  EXPECT_EQ(c.kept_count_shift, 0);
  EXPECT_EQ(c.kept_count_moved, 2);
  EXPECT_TRUE(c.only_near_ties());
  // Per head, head 1's own boundary (0.499 evicted, nothing else) would not see head 0's 0.5.
  a.layers[0][0].selection_layer_wide = a.layers[0][1].selection_layer_wide = false;
  EXPECT_EQ(compare_kept_sets(a, b).kept_count_shift, 2);
}

TEST(KeptSetComparison, TheForkIsTheFirstDivergenceOnly) {
  KeptSetFork fork;
  EXPECT_TRUE(fork.observe(0, one_head({0, 1}, kScores), one_head({0, 1})));
  EXPECT_FALSE(fork.observe(1, one_head({0, 1}, kScores), one_head({0, 2})));
  EXPECT_FALSE(fork.observe(2, one_head({0, 1}, kScores), one_head({0, 3})));  // after the fork: ignored
  EXPECT_EQ(fork.step(), 1);
  EXPECT_TRUE(fork.at_fork().only_near_ties());
  EXPECT_EQ(fork.describe().rfind("step 1: 2 entries (2 near ties, 0 real", 0), 0u) << fork.describe();
}

std::vector<int> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& v : t) v = int(rng() % 300);
  return t;
}

// A: the CPU decoder on an f16 cache with `policy_a`; B: on an f32 cache with `policy_b`.
::testing::AssertionResult f16_vs_f32(const PolicyProgram& policy_a, const PolicyProgram& policy_b,
                                      const std::string& budget, uint64_t model_seed, test::LockstepOutcome* out) {
  const auto model = make_random_model(test::gqa_test_config("kept-set-test"), model_seed);
  auto a = make_decoder(*model, DecoderDevice::Cpu, {.threads = 1, .kv_type = KvType::F16});
  auto b = make_decoder(*model, DecoderDevice::Cpu, {.threads = 1, .kv_type = KvType::F32});
  EngineOptions options{Budget::parse(budget), 0};
  options.trace_selection = true;
  EvictionEngine ea(policy_a, model->config, options), eb(policy_b, model->config, options);
  return test::eviction_in_lockstep(*a, ea, *b, eb, random_prompt(160, 5), 24, test::logit_bound, out);
}

class KeptSetLockstep : public ::testing::TestWithParam<const char*> {};

// Per-head policies whose decisions the trace classifies: the caches stay the same or part on near ties.
TEST_P(KeptSetLockstep, F16AndF32CachesPartOnlyOnNearTies) {
  const auto policy = load_policy(GetParam(), {});
  for (uint64_t seed : {21u, 22u, 23u}) {
    test::LockstepOutcome out;
    const auto result = f16_vs_f32(*policy, *policy, "64", seed, &out);
    EXPECT_TRUE(result) << GetParam() << " model seed " << seed;
    EXPECT_GE(out.same_cache_steps, 1);
    std::printf("%s seed %llu: %s\n", GetParam(), static_cast<unsigned long long>(seed), result.message());
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, KeptSetLockstep,
                         ::testing::Values("snapkv", "cake", "h2o", "tova", "pyramidkv", "adakv"));

// The control: B scores with another parameter, so its caches differ for a reason that is no
// rounding; the lockstep comparison must say so.
TEST(KeptSetLockstepControl, AnotherParameterIsARealDifference) {
  const auto cake = load_policy("cake", {});
  const auto cake_max_pool = load_policy("cake", {{"pool", "max"}, {"kernel", "9"}});
  const auto result = f16_vs_f32(*cake, *cake_max_pool, "64", 21, nullptr);
  EXPECT_FALSE(result);
  EXPECT_NE(std::string(result.message()).find("more than near ties"), std::string::npos) << result.message();
}

}  // namespace
}  // namespace kvevict
