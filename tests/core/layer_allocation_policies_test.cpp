// select.layer_allocation: tokens (a layer_weight that is the layer's own budget in tokens) and the
// field file that needs it, SimLayerKV, against an independent reference on stories260K: the lazy
// test computed in double from the recorded queries and keys (the last n_last queries' attention over
// the keys before them, averaged over every query head and row, summed over the first n_initial and
// the last n_recent of those keys); lazy layers keep the sinks and the last n_recent - n_last tokens,
// the others everything.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

struct SimLayer { int n_last, n_recent, n_initial; };

// The lazy score of every layer (kvpress's `score` before the comparison with the threshold).
std::vector<double> lazy_scores(const reference::PromptData& p, const SimLayer& s) {
  std::vector<double> out;
  for (const auto& layer : p) {
    double sum = 0;
    int rows = 0;
    for (const reference::HeadData& h : layer)
      for (int g = 0; g < h.G; ++g)
        for (int q = 0; q < h.W; ++q, ++rows) {
          const double* a = &h.window_attention[(static_cast<size_t>(g) * h.W + q) * h.S];
          const int before = h.S - h.W;  // the keys before the window
          for (int t = 0; t < before; ++t)
            if (t < s.n_initial || t >= before - s.n_recent) sum += a[t];
        }
    out.push_back(sum / rows);
  }
  return out;
}

class LayerAllocationPolicies : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = load_model(test::stories_checkpoint());
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
  }
  EvictionReport run(const std::map<std::string, std::string>& params, const std::string& budget) {
    return test::prefill_report(*model_, tokens_, "simlayerkv", params, budget);
  }
  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
};

TEST_F(LayerAllocationPolicies, SimLayerKVKeepsSinksAndRecentInLazyLayersAndEverythingElsewhere) {
  const SimLayer s{1, 16, 4};
  const int S = static_cast<int>(tokens_.size());
  const reference::PromptData data = reference::collect(*model_, tokens_, s.n_last);
  std::vector<double> scores = lazy_scores(data, s);
  std::vector<double> sorted = scores;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_LT(sorted.front(), sorted.back()) << "every layer has the same lazy score: nothing to split";
  // A threshold between the layers' scores (so some layers are lazy and some are not), and 1.0.
  for (double threshold : {(sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2, 1.0}) {
    const EvictionReport r = run({{"lazy_threshold", std::to_string(threshold)}, {"n_recent", "16"},
                                  {"n_last", "1"}, {"n_initial", "4"}}, "100%");
    int lazy_layers = 0;
    for (size_t l = 0; l < scores.size(); ++l) {
      const bool lazy = scores[l] > threshold;
      lazy_layers += lazy;
      std::vector<int32_t> want;
      for (int t = 0; t < S; ++t)
        if (!lazy || t < s.n_initial || t >= S - (s.n_recent - s.n_last)) want.push_back(t);
      for (size_t h = 0; h < r.layers[l].size(); ++h) {
        EXPECT_EQ(r.layers[l][h].kept_positions, want) << "threshold " << threshold << " layer " << l << " head " << h;
        EXPECT_EQ(r.layers[l][h].budget, static_cast<int>(want.size())) << "the kept count is the recorded budget";
      }
    }
    if (threshold < 1.0) {
      EXPECT_GT(lazy_layers, 0);
      EXPECT_LT(lazy_layers, static_cast<int>(scores.size()));
    } else {
      EXPECT_EQ(lazy_layers, 0);
    }
  }
}

TEST_F(LayerAllocationPolicies, TheBudgetCapsTheTokenAllocationAndFullTurnsItOff) {
  // No layer lazy: each wants all T tokens, --budget caps them at 40.
  const EvictionReport capped = run({{"lazy_threshold", "1.0"}, {"n_recent", "16"}}, "40");
  for (const auto& layer : capped.layers)
    for (const HeadReport& h : layer) EXPECT_EQ(h.kept, 40);
  // The kvpress default n_recent 1024 exceeds this prompt: no compression (every token protected).
  const EvictionReport short_prompt = run({{"lazy_threshold", "0"}}, "100%");
  for (const auto& layer : short_prompt.layers)
    for (const HeadReport& h : layer) EXPECT_EQ(h.kept, short_prompt.prompt_len);
  const EvictionReport off = run({{"lazy_threshold", "0"}, {"n_recent", "16"}}, "full");
  EXPECT_FALSE(off.prefill_evicted);
}

TEST(LayerAllocationSettings, TokensNeedALayerWeightAndNoCascading) {
  const std::string head = "name: p\nabout: x\nscore: |\n  score[t] = pos[t]\n";
  try {
    dsl::compile_policy_text("p.yaml", head + "select: {layer_allocation: tokens}\n");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:5:28: error: 'layer_allocation: tokens' reads each layer's budget from "
                                         "a layer_weight program; the file has none"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dsl::compile_policy_text("p.yaml", head + "select: {layer_allocation: bytes}\n"), UsageError);
  EXPECT_THROW(dsl::compile_policy_text("p.yaml", head + "run: {cascading: true}\nselect: {layer_allocation: tokens}\n"
                                                         "layer_weight: |\n  layer_weight = 1\n"),
               UsageError);
}

}  // namespace
}  // namespace kvevict
