// The token-pair policies of policies/field/ (R-KV) keep exactly the tokens of their independent
// double-precision references (reference_pairwise_policies.cpp) on stories260K at prefill.
#include <gtest/gtest.h>

#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_pairwise_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

class PairwisePolicies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
    data_ = new reference::PromptData(reference::collect(*model_, tokens_, 8));  // R-KV's window_size
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
  static int S() { return static_cast<int>(tokens_.size()); }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptData* data_;
};

Model* PairwisePolicies::model_ = nullptr;
std::vector<int> PairwisePolicies::tokens_;
reference::PromptData* PairwisePolicies::data_ = nullptr;

TEST_F(PairwisePolicies, RkvMatchesTheReferenceAtPrefill) {
  struct Case {
    std::map<std::string, std::string> params;
    reference::RkvParams rp;
  };
  std::vector<Case> cases = {{{}, {}}};
  cases.push_back({{{"gqa", "mean"}}, {}});
  cases.back().rp.gqa_max = false;
  cases.push_back({{{"retain", "first"}, {"threshold", "0.2"}, {"mix_lambda", "0.5"}}, {}});
  cases.back().rp.retain_last = false, cases.back().rp.threshold = 0.2, cases.back().rp.mix_lambda = 0.5;
  for (const Case& c : cases)
    for (int budget : {24, 60}) {
      std::string what = "rkv budget " + std::to_string(budget);
      for (const auto& [k, v] : c.params) what += " " + k + "=" + v;
      const EvictionReport got = test::prefill_report(*model_, tokens_, "rkv", c.params, std::to_string(budget));
      EXPECT_GT(test::expect_same_kept(got, reference::rkv(*data_, budget, c.rp), S(), what), 0) << what;
    }
}

TEST_F(PairwisePolicies, TheRedundancyTermDecides) {
  // With mix_lambda 0 the kept set is the redundancy's alone, and it differs from the importance's.
  reference::RkvParams only_redundancy, only_importance;
  only_redundancy.mix_lambda = 0;
  only_importance.mix_lambda = 1;
  EXPECT_NE(reference::rkv(*data_, 24, only_redundancy), reference::rkv(*data_, 24, only_importance));
  const EvictionReport got = test::prefill_report(*model_, tokens_, "rkv", {{"mix_lambda", "0"}}, "24");
  EXPECT_GT(test::expect_same_kept(got, reference::rkv(*data_, 24, only_redundancy), S(), "rkv mix_lambda 0"), 0);
}

}  // namespace
}  // namespace kvevict
