#pragma once
// Fixture bases for the policy tests on real stories260K attention: the model and the policy test
// prompt (policy_test_prompt.h), loaded once per test suite; every test skips with the reason when
// the checkpoint is absent. StoriesAttentionTest<W> adds the reference's record of the prompt's
// attention (reference_policies.h, W window rows). A derived suite that records more calls load()
// first in its own SetUpTestSuite and unload() last in its teardown.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "policy_test_prompt.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict::test {

class StoriesPromptTest : public ::testing::Test {
 protected:
  // False (and nothing loaded) when the checkpoint is absent.
  static bool load() {
    if (!stories_missing_reason().empty()) return false;
    model_ = load_model(stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(kPolicyTestStory, true);
    return true;
  }
  static void unload() {
    delete model_;
    model_ = nullptr;
    tokens_.clear();
  }
  static void SetUpTestSuite() { load(); }
  static void TearDownTestSuite() { unload(); }
  void SetUp() override {
    if (const std::string why = stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }

  static int S() { return static_cast<int>(tokens_.size()); }

  // A fraction parameter x with floor(x * S) == n (NACL's and H2O's shares of the prompt).
  static std::string share_of_prompt(int n) {
    std::ostringstream s;
    s.precision(12);
    s << (n + 0.5) / S();
    return s.str();
  }

  static inline Model* model_ = nullptr;
  static inline std::vector<int> tokens_;
};

template <int kWindowRows>
class StoriesAttentionTest : public StoriesPromptTest {
 protected:
  static void SetUpTestSuite() {
    if (load()) data_ = new reference::PromptData(reference::collect(*model_, tokens_, kWindowRows));
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
    unload();
  }

  static inline reference::PromptData* data_ = nullptr;
};

}  // namespace kvevict::test
