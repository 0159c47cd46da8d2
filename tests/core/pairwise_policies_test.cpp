// The token-pair policies of policies/field/ (R-KV) keep exactly the tokens of their independent
// double-precision references (reference_pairwise_policies.cpp) on stories260K at prefill.
#include <gtest/gtest.h>

#include <algorithm>

#include "decode_spy.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "stories_prompt_test.h"
#include "reference_pairwise_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

// The reference's record with 8 window rows: R-KV's window_size.
class PairwisePolicies : public test::StoriesAttentionTest<8> {};

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

TEST_F(PairwisePolicies, RkvAtPrefillAndEveryIntervalWhileDecoding) {
  // decode_interval 4: the prefill, then steps 4, 8 and 12 cut each head back to the budget by the
  // same rule on what it holds (the newest 8 query rows, the newest 8 entries kept).
  const ModelConfig& c = model_->config;
  const auto policy = load_policy("rkv", {{"decode_interval", "4"}});
  const reference::RkvParams rp;
  const int n = test::check_decisions(*model_, tokens_, *policy, "40", 12, 8,
      [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>& rows, int, int h, int budget, int step) {
        if (step > 0 && step % 4 != 0) {
          std::vector<int32_t> p = b.pos;
          std::sort(p.begin(), p.end());
          return p;
        }
        return reference::rkv_keep(b, rows, h, c.group_size(), c.head_dim, budget, rp);
      }, "rkv decode");
  EXPECT_EQ(n, 4 * c.n_layers * c.n_kv_heads) << "the prefill and three decode compressions evict in every head";
}

}  // namespace
}  // namespace kvevict
