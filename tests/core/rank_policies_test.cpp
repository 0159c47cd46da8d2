// The field policies built on the rank and sort statistics (dsl/sort_ops.h) and the out_norm_l1
// signal keep exactly the tokens of the independent references of reference_rank_policies.cpp on
// stories260K (real attention, values and W_o), at prefill.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "policy_run_checks.h"
#include "reference_rank_policies.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

constexpr int kWindow = 16;

class RankPolicies : public test::StoriesAttentionTest<kWindow> {
 protected:
  static EvictionReport prefill(const std::string& name, const std::map<std::string, std::string>& params, int budget) {
    return test::prefill_report(*model_, tokens_, name, params, std::to_string(budget));
  }
};

// The signal alone: out_norm_l1 as the engine produces it orders the tokens as ||W_o,h v||_1 in double.
TEST_F(RankPolicies, OutNormL1KeepsTheTopTokensOfTheDirectNorm) {
  for (int budget : {20, 50}) {
    // A one-line policy file in a temporary directory, loaded by path.
    const std::string dir = ::testing::TempDir();
    const std::string file = dir + "/kvevict_out_norm_l1_topk_" + std::to_string(::getpid()) + ".yaml";
    FILE* f = std::fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("name: out_norm_l1_topk\nabout: test\nscore: |\n  score[t] = mean(h: out_norm_l1[h, t])\n", f);
    std::fclose(f);
    const int evicted = test::expect_same_kept(prefill(file, {}, budget), reference::out_norm_l1_topk(*data_, *model_, budget), S(),
                                               "out_norm_l1 budget " + std::to_string(budget));
    EXPECT_GT(evicted, 0);
  }
}

TEST_F(RankPolicies, DefensiveKvKeepsTheReferenceTokens) {
  for (int budget : {24, 40, 72}) {
    for (const char* threshold : {"0.9", "0.5", "0"}) {
      const std::string what = "defensive_kv budget " + std::to_string(budget) + " threshold " + threshold;
      const auto want = reference::defensive_kv(*data_, *model_, budget, kWindow, 5, std::stod(threshold));
      const int evicted = test::expect_same_kept(
          prefill("defensive_kv", {{"window", std::to_string(kWindow)}, {"threshold", threshold}}, budget), want, S(), what);
      EXPECT_GT(evicted, 0) << what;
    }
  }
}

// The stage-1 lift must matter on this prompt, or the test above could not see it wrong.
TEST_F(RankPolicies, DefensiveKvStageOneChangesTheKeptSet) {
  bool differs = false;
  for (int budget : {24, 40, 72})
    differs = differs || reference::defensive_kv(*data_, *model_, budget, kWindow, 5, 0.9) !=
                             reference::defensive_kv(*data_, *model_, budget, kWindow, 5, 0.0);
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace kvevict
