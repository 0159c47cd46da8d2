// Every policy the engine can express with a hand-written PolicyProgram keeps exactly the tokens
// that the independent reference (reference_policies.cpp, written from the spec formulas) keeps, on
// real stories260K attention. The DSL policy files will be checked against the same references.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "hand_policies.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

constexpr int kWindow = 16;

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high. The ball "
    "flew over the tree and landed in the pond. Lily was sad because she could not get her ball. Her "
    "friend Tom came and said, \"Don't be sad, Lily. I will help you.\" Tom found a long stick and pulled "
    "the ball out of the water. Lily was so happy. She hugged Tom and said thank you.";

class ReferencePolicies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(kStory, true);
    data_ = new reference::PromptData(reference::collect(*model_, tokens_, kWindow));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete model_;
    data_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }

  int S() const { return static_cast<int>(tokens_.size()); }

  EvictionReport run(const PolicyProgram& policy, const std::string& budget, uint64_t seed = 0) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(policy, model_->config, {Budget::parse(budget), seed});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return engine.report();
  }

  void expect_same(const EvictionReport& got, const reference::KeptSets& want, const std::string& what) {
    ASSERT_EQ(got.layers.size(), want.size());
    for (size_t l = 0; l < want.size(); ++l) {
      ASSERT_EQ(got.layers[l].size(), want[l].size());
      for (size_t h = 0; h < want[l].size(); ++h) {
        const auto& g = got.layers[l][h].kept_positions;
        const std::vector<int32_t> w(want[l][h].begin(), want[l][h].end());
        EXPECT_EQ(g, w) << what << ": layer " << l << " head " << h;
      }
    }
  }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptData* data_;
};

Model* ReferencePolicies::model_ = nullptr;
std::vector<int> ReferencePolicies::tokens_;
reference::PromptData* ReferencePolicies::data_ = nullptr;

TEST_F(ReferencePolicies, PromptIsLongEnough) { EXPECT_GT(S(), 100); }

TEST_F(ReferencePolicies, SnapKV) {
  expect_same(run(test::snap_policy(kWindow, 5, false, false), "48"),
              reference::snapkv(*data_, 48, {kWindow, 5, false}), "snapkv");
}

TEST_F(ReferencePolicies, AdaKV) {
  test::HandPolicy p = test::snap_policy(kWindow, 7, true, true);
  p.desc.select.scope = SelectScope::Layer;
  p.desc.select.floor_alpha = 0.2;
  expect_same(run(p, "48"), reference::adakv(*data_, 48, {kWindow, 7, true}, 0.2), "adakv");
}

TEST_F(ReferencePolicies, CakeOneShotAndCascading) {
  reference::CakeParams cp;
  cp.window = kWindow;
  const auto want = reference::cake(*data_, 40, cp);
  expect_same(run(test::cake_policy(kWindow, 200.0, false), "40"), want, "cake one-shot");
  // Cascading: same sets where the final budgets agree; the rounding may move a token between layers.
  const EvictionReport c = run(test::cake_policy(kWindow, 200.0, true), "40");
  const auto budgets = reference::cake_budgets(reference::cake_preferences(*data_, cp), S(), 40, cp);
  for (size_t l = 0; l < want.size(); ++l) {
    EXPECT_LE(std::abs(c.layers[l][0].budget - kWindow - budgets[l]), 1) << "layer " << l;
    if (c.layers[l][0].budget - kWindow == budgets[l]) {
      for (size_t h = 0; h < want[l].size(); ++h) {
        EXPECT_EQ(c.layers[l][h].kept_positions, std::vector<int32_t>(want[l][h].begin(), want[l][h].end()));
      }
    }
  }
}

TEST_F(ReferencePolicies, CakeCodeRoundingStaysWithinOneTokenOfLargestRemainder) {
  reference::CakeParams cp;
  cp.window = kWindow;
  const auto pref = reference::cake_preferences(*data_, cp);
  const auto a = reference::cake_budgets(pref, S(), 40, cp);
  cp.code_rounding = true;
  const auto b = reference::cake_budgets(pref, S(), 40, cp);
  EXPECT_EQ(std::accumulate(a.begin(), a.end(), 0), std::accumulate(b.begin(), b.end(), 0));
  for (size_t l = 0; l < a.size(); ++l) EXPECT_LE(std::abs(a[l] - b[l]), 1);
}

TEST_F(ReferencePolicies, NaclWithSeededRandomShare) {
  for (uint64_t seed : {1u, 2u}) {
    // Budget 32 = 4 sinks + 8 recent + 20 free, half of it sampled: 10 top-k + 10 random.
    const auto got = run(test::nacl_policy(kWindow, 4, 8, 0.5, 1.0), "32", seed);
    expect_same(got, reference::nacl(*data_, {4, 8, 10, 10, 1.0, seed}), "nacl seed " + std::to_string(seed));
  }
  EXPECT_NE(reference::nacl(*data_, {4, 8, 10, 10, 1.0, 1}), reference::nacl(*data_, {4, 8, 10, 10, 1.0, 2}));
}

TEST_F(ReferencePolicies, H2OOneShot) {
  expect_same(run(test::h2o_policy(8, 0, 0), "40"), reference::h2o_one_shot(*data_, 40, 8), "h2o");
}

TEST_F(ReferencePolicies, KNormStreamingRandomFull) {
  expect_same(run(test::knorm_policy(), "40"), reference::knorm(*data_, 40), "knorm");
  expect_same(run(test::streaming_policy(4), "40"), reference::streamingllm(*data_, 40, 4), "streamingllm");
  expect_same(run(test::random_policy(), "40", 3), reference::random_policy(*data_, 40, 3), "random");
  expect_same(run(test::knorm_policy(), "full"), reference::full(*data_), "full");
}

TEST_F(ReferencePolicies, TovaKeepsOneSetPerLayer) {
  const auto t = reference::tova(*data_, 30);
  for (const auto& layer : t) {
    EXPECT_EQ(layer.front().size(), 30u);
    for (const auto& h : layer) EXPECT_EQ(h, layer.front());
  }
}

TEST(ReferenceFormulas, SpindleRampMatchesTheSpecWorkedExample) {
  // spec §4.1: m = 32, l = 4096, r = 0.40, l_w = 128 -> r_c = 0.381, r_c(0) = 0.712, r_c(31) = 0.05.
  const auto keep = reference::spindle_layer_keep(32, 4096, {128, 0.40, 0.05, true});
  const double lc = 4096 - 128;
  EXPECT_NEAR(keep.front() / lc, 0.712, 0.001);
  EXPECT_NEAR(keep.back() / lc, 0.05, 0.001);
  double mean = 0;
  for (int k : keep) mean += k / lc / 32;
  EXPECT_NEAR(mean, 0.381, 0.002);
}

TEST(ReferenceFormulas, PyramidBudgetsDecreaseAndAverageTheBudget) {
  const auto b = reference::pyramid_layer_budgets(32, 8000, 2048, 32, 20);
  EXPECT_TRUE(std::is_sorted(b.rbegin(), b.rend()));
  const double mean = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
  EXPECT_NEAR(mean, 2048 - 32, 0.02 * 2016);
}

}  // namespace
}  // namespace kvevict
