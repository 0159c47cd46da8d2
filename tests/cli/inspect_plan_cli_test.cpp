// `kvevict inspect --plan`: the eviction plan as one JSON object, without running the model, on a
// synthetic model (no files needed): the budgets by hand, the skip verdict at its boundary, and
// a bad budget as a usage error (exit 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "cli_run.h"

namespace kvevict {
namespace {

// A prompt of `n` bytes: the synthetic tokenizer maps each byte to one token, after BOS.
std::string prompt_of(int n) { return std::string(n, 'a'); }

TEST(InspectPlanCli, PrintsThePlanAsJson) {
  // synthetic:tiny has 2 layers and 2 KV heads; 99 bytes + BOS = 100 tokens.
  const test::CliRun r =
      test::run_kvevict("inspect -m synthetic:tiny -p " + prompt_of(99) + " --policy snapkv --budget 41 --plan");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["policy"], "snapkv");
  EXPECT_EQ(j["prompt_tokens"], 100);
  EXPECT_EQ(j["window"], 32);
  EXPECT_EQ(j["protect"]["recent"], 32);
  EXPECT_EQ(j["budget_plan"]["total"], 82);
  EXPECT_EQ(j["budget_plan"]["layers"], (std::vector<int>{41, 41}));
  EXPECT_EQ(j["budget_plan"]["layer_rule"], "uniform");
  EXPECT_EQ(j["select"]["scope"], "kv_head");
  EXPECT_EQ(j["prefill"]["skip"], false);
  EXPECT_EQ(j["geometry"]["n_layers"], 2);
}

TEST(InspectPlanCli, SkipAtTheBoundaryAndWeightedBudgetsAreNotListed) {
  const test::CliRun at = test::run_kvevict("inspect -m synthetic:tiny -p " + prompt_of(99) +
                                            " --policy cake --budget 68 --plan");  // 100 <= 68 + 32
  ASSERT_EQ(at.exit_code, 0) << at.err;
  const nlohmann::json j = nlohmann::json::parse(at.out);
  EXPECT_EQ(j["prefill"]["skip"], true);
  EXPECT_EQ(j["prefill"]["skip_rule"], "prompt_within_budget_plus_window");
  EXPECT_EQ(j["budget_plan"]["layer_rule"], "weighted");
  EXPECT_FALSE(j["budget_plan"].contains("layers"));
  const test::CliRun over = test::run_kvevict("inspect -m synthetic:tiny -p " + prompt_of(99) +
                                              " --policy cake --budget 67 --plan");
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_EQ(nlohmann::json::parse(over.out)["prefill"]["skip"], false);
}

TEST(InspectPlanCli, ABadBudgetIsAUsageError) {
  const test::CliRun r =
      test::run_kvevict("inspect -m synthetic:tiny -p " + prompt_of(9) + " --policy snapkv --budget total:7 --plan");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find("total:7"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvevict
