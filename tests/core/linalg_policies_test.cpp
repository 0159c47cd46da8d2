// The policy files that need linear algebra over the head dimension (policies/field/leverage.yaml,
// compactor.yaml, cap.yaml), loaded by name as built-ins, keep exactly the tokens of the
// independent double references of reference_linalg_policies.cpp on stories260K at prefill. The
// references are checked against identities of their own first (a hat matrix's trace), so a
// wrong reference cannot pass by agreeing with a wrong policy.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_linalg_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

class LinalgPolicies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
    data_ = new reference::LinalgPrompt(reference::record_linalg(*model_, tokens_));
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
  static reference::LinalgPrompt* data_;
};

Model* LinalgPolicies::model_ = nullptr;
std::vector<int> LinalgPolicies::tokens_;
reference::LinalgPrompt* LinalgPolicies::data_ = nullptr;

// The leverages of a ridge regression sum to the trace of its hat matrix, sum_i s_i^2 / (s_i^2 +
// 1e-2) over the singular values of X: at most k, and close to k for keys with O(1) entries over
// a few hundred tokens; each leverage lies in [0, 1].
TEST_F(LinalgPolicies, ReferenceLeverageSumsToTheHatMatrixTrace) {
  for (int sketch : {3, 8})
    for (int l = 0; l < data_->L; l += 2) {
      const std::vector<double> s = reference::leverage_scores(*data_, l, 0, sketch, 0, 0, S());
      const double sum = std::accumulate(s.begin(), s.end(), 0.0);
      const int k = std::min(sketch, data_->d);
      EXPECT_LE(sum, k + 1e-9) << "layer " << l << " sketch " << sketch;
      EXPECT_GT(sum, k - 0.5) << "layer " << l << " sketch " << sketch;
      for (double x : s) EXPECT_TRUE(x >= 0 && x <= 1) << x;
    }
}

// The sketch matters when it reduces the dimension, and the seed chooses it.
TEST_F(LinalgPolicies, ReferenceSketchDependsOnTheSeedWhenItReduces) {
  EXPECT_NE(reference::leverage(*data_, 40, 3, 0), reference::leverage(*data_, 40, 3, 1));
}

}  // namespace
}  // namespace kvevict
