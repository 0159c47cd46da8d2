// The table policies that need the newer table axes (dsl/table_data.h) with their shipped EXAMPLE
// tables keep exactly the tokens of the independent references of
// reference_stats_table_policies.cpp on stories260K:
//   expected_attention_stats.yaml  kvpress ExpectedAttentionStatsPress (tables [layer, head, d(, e)])
//   lukv.yaml                      kvpress LUKVPress (the curve [index, layer, kv_head], the press's
//                                  per-layer rounding of keep counts: select.head_allocation tokens)
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "core/engine/engine.h"
#include "core/engine/head_budgets.h"
#include "policy_run_checks.h"
#include "reference_stats_table_policies.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;

std::string table_path(const std::string& name) {
  return std::string(KVEVICT_TEST_SOURCE_DIR) + "/../policies/field/tables/" + name + ".example.tsv";
}

class StatsTablePolicies : public test::StoriesPromptTest {
 protected:
  static void SetUpTestSuite() {
    if (load()) qkv_ = new reference::PromptQkv(reference::record_qkv(*model_, tokens_));
  }
  static void TearDownTestSuite() {
    delete qkv_;
    qkv_ = nullptr;
    unload();
  }
  static EvictionReport prefill(const std::string& name, const Params& params, const std::string& budget) {
    return test::prefill_report(*model_, tokens_, name, params, budget);
  }
  static inline reference::PromptQkv* qkv_ = nullptr;
};

TEST_F(StatsTablePolicies, ExpectedAttentionStatsKeepsTheReferenceSets) {
  const auto mean = reference::read_table(table_path("expected_attention_stats_mean"));
  const auto cov = reference::read_table(table_path("expected_attention_stats_cov"));
  struct Case { int budget, n_sink, future; bool cov, vnorm; double eps; };
  for (const Case& c : {Case{40, 4, 512, true, true, 0}, Case{100, 4, 512, true, true, 0}, Case{60, 0, 16, true, true, 0},
                        Case{50, 4, 512, false, true, 0}, Case{50, 4, 512, true, false, 0},
                        Case{50, 2, 100, true, true, 0.001}}) {
    const Params params = {{"n_sink", std::to_string(c.n_sink)}, {"n_future_positions", std::to_string(c.future)},
                           {"use_covariance", c.cov ? "true" : "false"}, {"use_vnorm", c.vnorm ? "true" : "false"},
                           {"epsilon", std::to_string(c.eps)}};
    reference::ExpectedAttentionParams ep;
    ep.n_future = c.future;
    ep.n_sink = c.n_sink;
    ep.covariance = c.cov;
    ep.vnorm = c.vnorm;
    ep.epsilon = c.eps;
    const std::string what = "expected_attention_stats budget " + std::to_string(c.budget) + " sink " +
                             std::to_string(c.n_sink) + " future " + std::to_string(c.future) + (c.cov ? " cov" : "");
    const auto want = reference::expected_attention_stats(*qkv_, model_->config, mean, cov, c.budget, ep);
    EXPECT_GT(test::expect_same_kept(prefill("expected_attention_stats", params, std::to_string(c.budget)), want, S(), what), 0);
  }
}

// The statistics come from the tables, not from the prompt: the kept sets differ from
// expected_attention.yaml's (which estimates them from the prompt's queries) at the same budget.
TEST_F(StatsTablePolicies, ExpectedAttentionStatsIgnoresThePromptsQueries) {
  const EvictionReport stats = prefill("expected_attention_stats", {}, "40");
  const EvictionReport prompt = prefill("expected_attention", {}, "40");
  int differ = 0;
  for (size_t l = 0; l < stats.layers.size(); ++l)
    for (size_t h = 0; h < stats.layers[l].size(); ++h)
      differ += stats.layers[l][h].kept_positions != prompt.layers[l][h].kept_positions;
  EXPECT_GT(differ, 0);
}

TEST_F(StatsTablePolicies, LukvKeepsTheReferenceSetsAndCounts) {
  const auto curve = reference::read_table(table_path("lukv"));
  const int L = model_->config.n_layers, H = model_->config.n_kv_heads;
  struct Case { double ratio; int window; };
  // 0.625: Python's round(62.5) is 62 (half to even), so row 61, not 62. (A ratio as low as 0.125
  // evicts only the lowest scores, where epsilon = 0.02 swamps the float probabilities: at layer 0
  // equal tokens have equal |v| and tie in float, so a double reference ranks them otherwise.)
  for (const Case& c : {Case{0.5, 1}, Case{0.25, 1}, Case{0.625, 1}, Case{0.8, 1}, Case{0.97, 1}, Case{0.3, 8}, Case{0.0, 1}}) {
    const std::string what = "lukv ratio " + std::to_string(c.ratio) + " window " + std::to_string(c.window);
    std::ostringstream ratio;
    ratio.precision(17);
    ratio << c.ratio;
    const Params params = {{"compression_ratio", ratio.str()}, {"window", std::to_string(c.window)}};
    reference::ExpectedAttentionParams ep;
    ep.covariance = true;
    ep.epsilon = 0.02;
    const auto want = reference::lukv(*qkv_, model_->config, curve, c.ratio, 4, c.window, ep);
    // --budget does not enter: any budget but full gives the same sets.
    for (const std::string budget : {"10", "1000"}) {
      const EvictionReport r = prefill("lukv", params, budget);
      // Near-ties only (test::expect_same_kept_up_to_ties; the scores of the unprotected positions).
      const int evicted = test::expect_same_kept_up_to_ties(
          r, want, S(), [&](int l, int kv) { return reference::lukv_scores(*qkv_, model_->config, l, kv, ep); }, 1e-5,
          what + " budget " + budget);
      if (c.ratio > 0) {
        EXPECT_GT(evicted, 0) << what;
      }
      const auto counts = reference::lukv_counts(curve, L, H, c.ratio, S());
      std::set<int> distinct;
      for (int l = 0; l < L; ++l)
        for (int h = 0; h < H; ++h) {
          EXPECT_EQ(r.layers[l][h].budget, counts[l][h]) << what << " layer " << l << " head " << h;
          distinct.insert(counts[l][h]);
        }
      if (c.ratio > 0) {
        EXPECT_GT(distinct.size(), 2u) << what << ": the curve's head counts do not differ";
      } else {
        EXPECT_EQ(evicted, 0) << what << ": compression_ratio 0 compresses nothing";
      }
    }
  }
}

// round_head_counts on hand numbers: LUKVPress's total, floors and remainder.
TEST(RoundHeadCounts, FollowsThePressesRounding) {
  // sum 10.2 -> total 10; floors 1 + 2 + 3 + 3 = 9; the remainder 1 goes to the largest fraction (0.7).
  EXPECT_EQ(round_head_counts({1.2, 2.7, 3.1, 3.2}, {10, 10, 10, 10}), (std::vector<int64_t>{1, 3, 3, 3}));
  // sum 2.5 rounds half to even: 2; floors 0 + 0 + 2 = 2, no remainder; then each at least 1.
  EXPECT_EQ(round_head_counts({0.25, 0.25, 2.0}, {10, 10, 10}), (std::vector<int64_t>{1, 1, 2}));
  // Equal fractions: the lower head first. sum 3.0 -> 3; floors 0; the three heads get one each.
  EXPECT_EQ(round_head_counts({0.5, 0.5, 0.5, 1.5}, {10, 10, 10, 10}), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(round_head_counts({0.6, 0.6, 1.3}, {10, 10, 10}), (std::vector<int64_t>{1, 1, 1}));
  // The total is at least the head count and each count at most its length; NaN and negatives are 0.
  EXPECT_EQ(round_head_counts({NAN, -3, 50}, {5, 5, 5}), (std::vector<int64_t>{1, 1, 5}));
  EXPECT_EQ(round_head_counts({3, 3}, {0, 5}), (std::vector<int64_t>{0, 3}));
  // Through split_head_budgets: full heads keep all, the compressed ones their rounded counts.
  const std::vector<HeadPlan> plans = {{HeadMode::Full, 1.0}, {HeadMode::Compressed, 2.3}, {HeadMode::Compressed, 3.6}};
  EXPECT_EQ(split_head_budgets(100, plans, {20, 20, 20}, 4, HeadAllocation::Tokens), (std::vector<int>{20, 2, 4}));
}

}  // namespace
}  // namespace kvevict
