// Budget units (spec §8 `budget.unit`, core/engine/budget.h): parsing, the exact integer total per
// KV head, and the engine keeping exactly what each unit promises on stories260K.
#include <gtest/gtest.h>

#include "core/decode/decoder.h"
#include "core/engine/budget.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "evals/budget_text.h"
#include "policy_test_prompt.h"
#include "stories_prompt_test.h"
#include "test_models.h"

namespace kvevict {
namespace {

TEST(BudgetUnits, ParseAndResolve) {
  const Budget t = Budget::parse("total:600");
  EXPECT_EQ(t.kind, Budget::Kind::Total);
  const BudgetGeometry g{5, 4, 16};
  EXPECT_EQ(t.total_per_kv_head(300, g), 150);          // 600 tokens over 4 KV heads
  EXPECT_DOUBLE_EQ(t.tokens_per_head(300, g), 30.0);    // 600 / (5 layers x 4 heads)
  EXPECT_EQ(t.total_per_kv_head(20, g), 100);           // capped at the whole prompt, 20 x 5
  const Budget e = Budget::parse("excl_window:24");
  EXPECT_EQ(e.kind, Budget::Kind::TokensPerHeadExclWindow);
  EXPECT_DOUBLE_EQ(e.tokens_per_head(300, g), 40.0);    // 24 + W
  EXPECT_EQ(e.total_per_kv_head(300, g), 200);
  EXPECT_EQ(Budget::parse("excl_window:0").total_per_kv_head(300, g), 80);  // the window only
  EXPECT_EQ(Budget::parse("40").total_per_kv_head(300, g), 200);
  EXPECT_EQ(Budget::parse("10%").total_per_kv_head(300, g), 150);
  for (const char* bad : {"total:", "total:0", "total:12.5", "total:-4", "total:x", "excl_window:", "excl_window:-1",
                          "excl_window:abc", "tokens:5", "12 "}) {
    try {
      Budget::parse(bad, "--budget");
      ADD_FAILURE() << bad << " parsed";
    } catch (const UsageError& err) {
      EXPECT_NE(std::string(err.what()).find("--budget"), std::string::npos) << err.what();
    }
  }
  EXPECT_THROW(t.check_model(5, 7), UsageError);
  EXPECT_NO_THROW(t.check_model(5, 4));
  EXPECT_THROW(Budget::parse("excl_window:400").check_prompt(300), UsageError);
  // Display order in leaderboards: ratios, per-head counts, totals, full.
  const char* order[] = {"10%", "64", "excl_window:64", "128", "total:512", "total:4096", "full"};
  for (size_t i = 1; i < std::size(order); ++i)
    EXPECT_LT(evals::budget_sort_key(order[i - 1]), evals::budget_sort_key(order[i])) << order[i];
}

class BudgetUnitsEngine : public test::StoriesPromptTest {
 protected:
  EvictionReport run(const std::string& policy, const std::string& budget) {
    const auto p = load_policy(policy, {{"window", "16"}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1});
    EvictionEngine engine(*p, model_->config, {Budget::parse(budget), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return engine.report();
  }
  static int64_t kept(const EvictionReport& r) {
    int64_t n = 0;
    for (const auto& layer : r.layers)
      for (const auto& h : layer) n += h.kept;
    return n;
  }
};

TEST_F(BudgetUnitsEngine, TotalKeepsExactlyNTokensOverAllLayersAndHeads) {
  const int L = model_->config.n_layers, Hkv = model_->config.n_kv_heads;
  // A total that is not a multiple of L: layers get unequal budgets, the sum is still exact.
  const int64_t n = static_cast<int64_t>(40 * L + 3) * Hkv;
  const EvictionReport r = run("cake", "total:" + std::to_string(n));
  ASSERT_TRUE(r.prefill_evicted);
  EXPECT_EQ(kept(r), n);
  EXPECT_EQ(r.budget, "total:" + std::to_string(n));
  // total:(40 x L x Hkv) is the same decision as 40 per (layer, KV head).
  const EvictionReport a = run("snapkv", "total:" + std::to_string(40 * L * Hkv)), b = run("snapkv", "40");
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) EXPECT_EQ(a.layers[l][h].kept_positions, b.layers[l][h].kept_positions);
  EXPECT_THROW(run("cake", "total:" + std::to_string(40 * L * Hkv + 1)), UsageError);
}

TEST_F(BudgetUnitsEngine, ExclWindowAddsThePolicyWindow) {
  const int L = model_->config.n_layers, Hkv = model_->config.n_kv_heads;
  const EvictionReport a = run("cake", "excl_window:24"), b = run("cake", "40");
  ASSERT_TRUE(a.prefill_evicted);
  EXPECT_EQ(kept(a), static_cast<int64_t>(40) * L * Hkv);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) EXPECT_EQ(a.layers[l][h].kept_positions, b.layers[l][h].kept_positions);
  // and differs from 24 tokens with the window inside
  EXPECT_EQ(kept(run("cake", "24")), static_cast<int64_t>(24) * L * Hkv);
}

}  // namespace
}  // namespace kvevict
