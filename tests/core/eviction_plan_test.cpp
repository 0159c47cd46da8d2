// The eviction plan (core/engine/eviction_plan.h) of built-in and field policies: static budgets
// against a split computed here by hand (base + 1 on the first `total mod L` layers) and against the
// budgets the engine reports after a real stories260K prefill; protected sets against the positions
// the engine keeps; the skip rule at its boundary (S = B, B + 1, with and without the window), the
// window clamped to a short prompt; which rule a data-dependent allocation names; that a plan is a
// pure function of its inputs; and the errors for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/engine/eviction_plan.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;

EvictionPlan plan_for(const std::string& policy, const Params& params, const ModelConfig& config,
                      const std::string& budget, int prompt_len, std::span<const int> tokens = {}) {
  const auto p = load_policy(policy, params);
  return make_eviction_plan(*p, config, Budget::parse(budget), prompt_len, tokens);
}

// The even split of `total` tokens over `layers` layers, by hand: every layer total / L, the
// remainder one token each to the lowest layers (valid when no floor or cap binds).
std::vector<int> even_split(int64_t total, int layers) {
  std::vector<int> out(layers, static_cast<int>(total / layers));
  for (int k = 0; k < total % layers; ++k) ++out[k];
  return out;
}

// stories260K's geometry (the example tables of field policies are shaped for it), no weights.
ModelConfig stories_shaped() {
  ModelConfig c = synthetic_config("tiny");
  c.n_layers = 5, c.dim = 64, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 8;
  return c;
}

int64_t sum(const std::vector<int>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(EvictionPlan, StaticBudgetsOfSnapKVOnASyntheticGeometryAreTheEvenSplit) {
  const ModelConfig c = synthetic_config("smollm2-135m");  // 30 layers, 3 KV heads
  constexpr int S = 1000;
  struct Case { std::string budget; int64_t total; };
  for (const Case& k : {Case{"10%", 100 * 30}, Case{"61.5", 1845}, Case{"excl_window:40", (40 + 32) * 30},
                        Case{"total:" + std::to_string(3 * (30 * 50 + 7)), 30 * 50 + 7}}) {
    const EvictionPlan plan = plan_for("snapkv", {}, c, k.budget, S);
    SCOPED_TRACE(k.budget);
    EXPECT_EQ(plan.budget.total, k.total);
    EXPECT_EQ(plan.budget.layer_rule, LayerBudgetRule::Uniform);
    EXPECT_EQ(plan.budget.head_rule, HeadBudgetRule::Layer);
    ASSERT_TRUE(plan.static_layer_budgets());
    EXPECT_EQ(plan.budget.layer, even_split(k.total, 30));
    EXPECT_EQ(sum(plan.budget.layer), k.total);
    ASSERT_EQ(plan.budget.head.size(), 30u * 3);
    for (int l = 0; l < 30; ++l)
      for (int h = 0; h < 3; ++h) EXPECT_EQ(plan.static_head_budget(l, h), plan.budget.layer[l]);
    EXPECT_EQ(plan.static_head_budget(30, 0), -1);
    EXPECT_EQ(plan.static_head_budget(0, 3), -1);
    EXPECT_EQ(plan.budget.protected_floor, 32);  // protect.recent = window
    EXPECT_FALSE(plan.prefill.skip);
  }
}

TEST(EvictionPlan, FloorsBindWhenTheBudgetIsBelowTheProtectedSet) {
  // snapkv protects its 32-token window; a total of 20 tokens per layer cannot cover it: the floors
  // are dropped and the total is still split exactly (budget_allocator.h).
  const ModelConfig c = synthetic_config("tiny");  // 2 layers, 2 KV heads
  const EvictionPlan plan = plan_for("snapkv", {}, c, "20", 500);
  EXPECT_EQ(plan.budget.total, 40);
  EXPECT_EQ(plan.budget.layer, (std::vector<int>{20, 20}));
  const EvictionPlan wide = plan_for("snapkv", {}, c, "33", 500);
  EXPECT_EQ(wide.budget.layer, (std::vector<int>{33, 33}));
  EXPECT_EQ(wide.budget.protected_floor, 32);
}

TEST(EvictionPlan, ProtectedSetsOfBothPhases) {
  const ModelConfig c = synthetic_config("tiny");
  EXPECT_EQ(plan_for("snapkv", {{"window", "24"}}, c, "50%", 300).protect, (ProtectedSet{0, 24}));
  EXPECT_EQ(plan_for("streamingllm", {{"sinks", "6"}}, c, "50%", 300).protect, (ProtectedSet{6, 0}));
  // H2O: recent = floor(0.1 S), so the plan follows the prompt length.
  EXPECT_EQ(plan_for("h2o", {}, c, "50%", 300).protect, (ProtectedSet{0, 30}));
  EXPECT_EQ(plan_for("h2o", {}, c, "50%", 309).protect, (ProtectedSet{0, 30}));
  EXPECT_EQ(plan_for("h2o", {}, c, "50%", 310).protect, (ProtectedSet{0, 31}));
  // Without decode_* the decoding phase protects what the prefill did.
  const EvictionPlan snap = plan_for("snapkv", {}, c, "50%", 300);
  EXPECT_EQ(snap.decode.protect, snap.protect);
  // PrefillDecodingPress: the decoding press protects nothing (protect.decode_recent: 0).
  const EvictionPlan pd = plan_for("prefill_decoding", {{"window", "16"}}, c, "50%", 300);
  EXPECT_EQ(pd.protect, (ProtectedSet{0, 16}));
  EXPECT_EQ(pd.decode.protect, (ProtectedSet{0, 0}));
  // The floor is capped at the prompt.
  EXPECT_EQ(plan_for("snapkv", {}, c, "full", 20).budget.protected_floor, 20);
}

TEST(EvictionPlan, SkipRuleAtItsBoundary) {
  const ModelConfig c = synthetic_config("tiny");
  // S <= B: skip; S = B + 1: evict.
  EXPECT_TRUE(plan_for("snapkv", {}, c, "100", 100).prefill.skip);
  EXPECT_FALSE(plan_for("snapkv", {}, c, "100", 101).prefill.skip);
  EXPECT_EQ(plan_for("snapkv", {}, c, "100", 101).prefill.skip_rule, SkipRule::WithinBudget);
  // CAKE's rule S <= B + W (window 32).
  EXPECT_EQ(plan_for("cake", {}, c, "100", 132).prefill.skip_rule, SkipRule::WithinBudgetPlusWindow);
  EXPECT_TRUE(plan_for("cake", {}, c, "100", 132).prefill.skip);
  EXPECT_FALSE(plan_for("cake", {}, c, "100", 133).prefill.skip);
  EXPECT_TRUE(plan_for("cake", {{"window", "8"}}, c, "100", 108).prefill.skip);
  EXPECT_FALSE(plan_for("cake", {{"window", "8"}}, c, "100", 109).prefill.skip);
  // ... and with skip_if_prompt_le: budget, S <= B.
  EXPECT_TRUE(plan_for("cake", {{"skip_if_prompt_le", "budget"}}, c, "100", 100).prefill.skip);
  EXPECT_FALSE(plan_for("cake", {{"skip_if_prompt_le", "budget"}}, c, "100", 101).prefill.skip);
  // A percentage is never above the prompt: 100% skips, 99% of 100 tokens keeps 99.
  EXPECT_TRUE(plan_for("snapkv", {}, c, "100%", 100).prefill.skip);
  EXPECT_FALSE(plan_for("snapkv", {}, c, "99%", 100).prefill.skip);
  // A threshold decides its own counts: only --budget full skips, even for a short prompt.
  const EvictionPlan dms = plan_for("dms", {}, c, "100", 50);
  EXPECT_EQ(dms.prefill.skip_rule, SkipRule::OnlyFullBudget);
  EXPECT_FALSE(dms.prefill.skip);
  EXPECT_TRUE(plan_for("dms", {}, c, "full", 50).prefill.skip);
  EXPECT_TRUE(plan_for("snapkv", {}, c, "full", 5000).prefill.skip);
}

TEST(EvictionPlan, WindowLongerThanThePromptIsClampedToItsRows) {
  const ModelConfig c = synthetic_config("tiny");
  const EvictionPlan shorter = plan_for("snapkv", {}, c, "excl_window:5", 10);
  EXPECT_EQ(shorter.window, 32);
  EXPECT_EQ(shorter.window_rows, 10);
  EXPECT_EQ(shorter.budget.tokens_per_head, 10);  // 5 + 32, capped at the prompt
  EXPECT_EQ(shorter.budget.protected_floor, 10);
  EXPECT_TRUE(shorter.prefill.skip);
  const EvictionPlan longer = plan_for("snapkv", {}, c, "excl_window:5", 100);
  EXPECT_EQ(longer.window_rows, 32);
  EXPECT_EQ(longer.budget.tokens_per_head, 37);
  EXPECT_EQ(longer.budget.total, 74);
  // A policy that reads A_now keeps at least one query row even without a window.
  EXPECT_EQ(plan_for("tova", {}, c, "50%", 100).query_window, 1);
  EXPECT_EQ(plan_for("knorm", {}, c, "50%", 100).window, 0);
}

TEST(EvictionPlan, DataDependentAllocationsNameTheirRule) {
  const ModelConfig c = synthetic_config("tiny");
  const EvictionPlan cake = plan_for("cake", {}, c, "40", 300);
  EXPECT_EQ(cake.budget.layer_rule, LayerBudgetRule::Weighted);
  EXPECT_FALSE(cake.static_layer_budgets());
  EXPECT_TRUE(cake.budget.head.empty());
  EXPECT_EQ(cake.static_head_budget(0, 0), -1);
  EXPECT_EQ(cake.budget.total, 80);  // the total is fixed all the same
  EXPECT_TRUE(plan_for("cake", {{"cascading", "true"}}, c, "40", 300).prefill.cascading);
  EXPECT_EQ(plan_for("pyramidkv", {}, c, "40", 300).budget.layer_rule, LayerBudgetRule::Weighted);
  EXPECT_EQ(plan_for("simlayerkv", {}, c, "40", 300).budget.layer_rule, LayerBudgetRule::Tokens);
  const EvictionPlan ada = plan_for("adakv", {}, c, "40", 300);  // layers static, heads by joint top-k
  EXPECT_EQ(ada.budget.head_rule, HeadBudgetRule::LayerAdaptive);
  EXPECT_EQ(ada.budget.layer, (std::vector<int>{40, 40}));
  EXPECT_TRUE(ada.budget.head.empty());
  EXPECT_EQ(ada.select.scope, SelectScope::Layer);
  EXPECT_EQ(plan_for("headkv", {}, stories_shaped(), "40", 300).budget.head_rule, HeadBudgetRule::HeadPlan);
  const EvictionPlan dms = plan_for("dms", {}, c, "40", 300);
  EXPECT_EQ(dms.budget.head_rule, HeadBudgetRule::SelectionOutput);
  EXPECT_TRUE(dms.select.threshold);
  EXPECT_TRUE(dms.select.kept_count_is_output);
  EXPECT_FALSE(plan_for("dms", {}, c, "full", 300).select.threshold);  // --budget full turns it off
  EXPECT_EQ(plan_for("tova", {}, c, "40", 300).select.scope, SelectScope::LayerShared);
  EXPECT_EQ(plan_for("tova", {}, c, "40", 300).decode.every, 1);
  EXPECT_EQ(plan_for("cake", {}, c, "40", 300).select.kept_order, KeptOrder::Score);
  EXPECT_EQ(plan_for("cake", {{"kept_order", "positional"}}, c, "40", 300).select.kept_order, KeptOrder::Positional);
  EXPECT_TRUE(plan_for("spindlekv", {}, c, "40", 300).stages.codebook);
  EXPECT_TRUE(plan_for("streamingllm", {}, c, "40", 300).stages.reassign_positions);
}

TEST(EvictionPlan, IsAPureFunctionOfItsInputs) {
  const ModelConfig c = synthetic_config("tiny");
  for (const std::string name : {"snapkv", "h2o", "nacl", "cake", "adakv", "streamingllm", "tova", "dms"}) {
    SCOPED_TRACE(name);
    const auto a = load_policy(name), b = load_policy(name);
    const Budget budget = Budget::parse("30%");
    const EvictionPlan first = make_eviction_plan(*a, c, budget, 400);
    const EvictionPlan other = make_eviction_plan(*a, c, budget, 401);
    EXPECT_EQ(make_eviction_plan(*b, c, budget, 400), first);  // another instance of the same policy
    EXPECT_EQ(make_eviction_plan(*a, c, budget, 400), first);  // after a plan for another prompt
    EXPECT_NE(other, first);
    EvictionPlan changed = first;
    changed.decode.protect.recent += 1;
    EXPECT_NE(changed, first);
  }
  // NACL's window and protected sets are shares of the prompt.
  const auto nacl = load_policy("nacl");
  const EvictionPlan n1 = make_eviction_plan(*nacl, c, Budget::parse("20%"), 1000);
  const EvictionPlan n2 = make_eviction_plan(*nacl, c, Budget::parse("20%"), 4000);
  EXPECT_EQ(n1.window, 10);  // floor(1% of the prompt)
  EXPECT_EQ(n2.window, 40);
  EXPECT_GT(n1.select.random_share, 0);
}

TEST(EvictionPlan, BadInputIsAUsageError) {
  const ModelConfig c = synthetic_config("tiny");  // 2 KV heads
  EXPECT_THROW(plan_for("snapkv", {}, c, "50%", -1), UsageError);
  EXPECT_THROW(plan_for("snapkv", {}, c, "total:7", 100), UsageError);  // not a multiple of the KV heads
  // FinchPress: the window is the prompt after the last delimiter, else the fallback window.
  const std::vector<int> tokens = {5, 13, 7, 13, 9, 9, 9};
  EXPECT_EQ(plan_for("finch", {}, c, "50%", 7, tokens).window, 3);
  const std::vector<int> none = {5, 6, 7};
  EXPECT_EQ(plan_for("finch", {}, c, "50%", 3, none).window, 32);
  EXPECT_THROW(plan_for("finch", {{"fallback_window", "0"}}, c, "50%", 3, none), UsageError);
}

// A real prefill: the budgets the engine reports equal the plan's static ones, which equal the
// split by hand; the plan's protected positions are kept; the skip verdict is the engine's.
class EvictionPlanOnStories : public test::StoriesPromptTest {};

TEST_F(EvictionPlanOnStories, ReportedBudgetsAreThePlansStaticOnes) {
  const int L = model_->config.n_layers, Hkv = model_->config.n_kv_heads;
  ASSERT_GT(S(), 150);
  const std::string total = "total:" + std::to_string(Hkv * (L * 70 + 3));  // 3 layers get one more
  for (const std::string name : {"snapkv", "h2o", "streamingllm", "tova", "knorm", "random", "adakv", "nacl"})
    for (const std::string budget : {"45%", "61", "excl_window:21", total.c_str()}) {
      SCOPED_TRACE(name + " " + budget);
      const EvictionPlan plan = plan_for(name, {}, model_->config, budget, S());
      ASSERT_TRUE(plan.static_layer_budgets());
      const int64_t want_total = budget == total ? L * 70 + 3 : plan.budget.total;
      EXPECT_EQ(plan.budget.total, want_total);
      if (budget == "61") {
        EXPECT_EQ(plan.budget.total, 61 * L);
      }
      EXPECT_EQ(plan.budget.layer, even_split(want_total, L));
      const EvictionReport r = test::prefill_report(*model_, tokens_, name, {}, budget);
      ASSERT_TRUE(r.prefill_evicted);
      ASSERT_EQ(r.layers.size(), static_cast<size_t>(L));
      int64_t reported = 0;
      for (int l = 0; l < L; ++l) {
        ASSERT_EQ(r.layers[l].size(), static_cast<size_t>(Hkv));
        reported += r.layers[l][0].budget;
        for (int h = 0; h < Hkv; ++h) {
          EXPECT_EQ(r.layers[l][h].budget, plan.budget.layer[l]) << "layer " << l << " head " << h;
          if (plan.budget.head_rule == HeadBudgetRule::Layer) {
            EXPECT_EQ(plan.static_head_budget(l, h), r.layers[l][h].budget);
          }
          // The plan's protected positions survive (when the budget holds them: NACL's 256 sinks do not fit).
          if (plan.budget.protected_floor > plan.budget.layer[l]) continue;
          const std::set<int32_t> kept(r.layers[l][h].kept_positions.begin(), r.layers[l][h].kept_positions.end());
          for (int p = 0; p < std::min(plan.protect.first, S()); ++p) EXPECT_TRUE(kept.count(p)) << "sink " << p;
          for (int p = std::max(0, S() - plan.protect.recent); p < S(); ++p) EXPECT_TRUE(kept.count(p)) << "recent " << p;
        }
      }
      EXPECT_EQ(reported, plan.budget.total);
    }
}

TEST_F(EvictionPlanOnStories, TheEnginesPlanIsThePureFunctions) {
  for (const std::string name : {"snapkv", "nacl", "cake", "finch"}) {
    SCOPED_TRACE(name);
    const auto policy = load_policy(name);
    const Budget budget = Budget::parse("30%");
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, model_->config, {budget, 0});
    EXPECT_EQ(engine.plan(), plan_before_prompt(*policy, plan_geometry(*policy, model_->config, budget), budget));
    EXPECT_EQ(engine.plan().prompt_len, 0);
    prefill_prompt(*decoder, std::span<const int>(tokens_), &engine, &engine);
    EXPECT_EQ(engine.plan(), make_eviction_plan(*policy, model_->config, budget, S(), tokens_));
    EXPECT_EQ(engine.plan().prompt_len, S());
  }
}

TEST_F(EvictionPlanOnStories, TheEngineSkipsExactlyWhenThePlanSays) {
  struct Case { std::string policy; Params params; int budget; bool skip; };
  const int s = S();
  for (const Case& k : {Case{"snapkv", {}, s, true}, Case{"snapkv", {}, s - 1, false}, Case{"cake", {}, s - 32, true},
                        Case{"cake", {}, s - 33, false}, Case{"cake", {{"skip_if_prompt_le", "budget"}}, s, true},
                        Case{"cake", {{"skip_if_prompt_le", "budget"}}, s - 1, false}}) {
    SCOPED_TRACE(k.policy + " " + std::to_string(k.budget));
    const std::string budget = std::to_string(k.budget);
    const EvictionPlan plan = plan_for(k.policy, k.params, model_->config, budget, s);
    EXPECT_EQ(plan.prefill.skip, k.skip);
    const EvictionReport r = test::prefill_report(*model_, tokens_, k.policy, k.params, budget);
    EXPECT_EQ(r.prefill_evicted, !k.skip);
    // Skipped or not, the reported budgets add up to the plan's total (CAKE's by its weights).
    int64_t reported = 0;
    for (const auto& layer : r.layers) reported += layer[0].budget;
    EXPECT_EQ(reported, plan.budget.total);
  }
}

}  // namespace
}  // namespace kvevict
