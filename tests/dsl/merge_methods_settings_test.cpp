// The `merge:` keys of merge.method cam (merge_budget) and d2o (ema_alpha, ema_beta) as they reach
// the policy description, and their errors (golden messages with file:line:col). What the stage does is
// tested in tests/core/merge_methods_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

const std::string kHead = "name: o\nabout: x\n";
const std::string kDecode = "run: {prefill: false, decode_every: 4}\n";
const std::string kScore = "score: |\n  score[t] = -key_norm[t]\n";

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("o.yaml", text);
}

TEST(MergeMethodSettings, CamAndItsBudgetReachTheDescription) {
  const auto plain = dsl::compile_policy_text("o.yaml", kHead + kDecode + "merge: {method: cam}\n" + kScore);
  EXPECT_EQ(plain.desc.merge.method, MergeMethod::Cam);
  EXPECT_EQ(plain.desc.merge.merge_budget, 32) << "CAMPress's default";
  const auto set = dsl::compile_policy_text(
      "o.yaml", kHead + "params:\n  m: {int: 4, min: 1, max: 64}\n" + kDecode + "merge: {method: cam, merge_budget: m * 2}\n" + kScore,
      {{"m", "5"}});
  EXPECT_EQ(set.desc.merge.merge_budget, 10);
  const auto file = load_policy("cam", {{"merge_budget", "7"}});
  EXPECT_EQ(file->description().merge.merge_budget, 7);
  EXPECT_EQ(file->description().merge.method, MergeMethod::Cam);
}

TEST(MergeMethodSettings, CamErrorsNameTheKey) {
  const struct {
    std::string text, want;
  } cases[] = {
      {"run: {decode_every: 4}\nmerge: {method: cam}",
       "o.yaml:3:6: error: merge.method cam merges at decode-time evictions only (its gate reads the attention of the "
       "decode steps); set 'prefill: false'"},
      {"run: {prefill: true, decode_every: 4}\nmerge: {method: cam}",
       "o.yaml:3:16: error: merge.method cam merges at decode-time evictions only"},
      {"run: {prefill: false}\nmerge: {method: cam}",
       "o.yaml:3:6: error: merge.method cam merges at decode-time evictions only; set 'decode_every: N'"},
      {kDecode + "merge: {method: cam, merge_budget: 0}",
       "o.yaml:4:36: error: 'merge_budget' must be a whole number between 1 and 10^6, got 0"},
      {kDecode + "merge: {method: cam, merge_budget: 2.5}",
       "o.yaml:4:36: error: 'merge_budget' must be a whole number between 1 and 10^6, got 2.5"},
      {kDecode + "merge: {method: pivot, merge_budget: 4}",
       "o.yaml:4:38: error: 'merge_budget' is a merge.method cam setting; merge.method pivot does not read it"},
      {kDecode + "merge: {merge_budget: 4}",
       "o.yaml:4:23: error: 'merge_budget' is a merge.method cam setting; merge.method codebook does not read it"},
      {kDecode + "merge: {method: cam, similarity_threshold: 0.5}",
       "o.yaml:4:44: error: 'similarity_threshold' is a nearest / pivot / weighted setting; merge.method cam does not "
       "read it"},
      {kDecode + "merge: {method: cam, merge_budget: nope}", "o.yaml:4:36: error:"},
      {kDecode + "select: {unfold_gqa: true}\nmerge: {method: cam}",
       "o.yaml:5:17: error: merge.method cam cannot be combined with select.unfold_gqa"},
  };
  for (const auto& c : cases) {
    const std::string e = usage_error(kHead + c.text + "\n" + kScore);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.text << "\n" << e;
  }
  EXPECT_EQ(usage_error(kHead + "merge: {method: cam, enabled: false}\n" + kScore), "") << "a disabled merge is no refusal";
}

TEST(MergeMethodSettings, D2oAndItsEmaReachTheDescription) {
  const auto plain = dsl::compile_policy_text("o.yaml", kHead + "merge: {method: d2o}\n" + kScore);
  EXPECT_EQ(plain.desc.merge.method, MergeMethod::D2o);
  EXPECT_EQ(plain.desc.merge.ema_alpha, 0.5);
  EXPECT_EQ(plain.desc.merge.ema_beta, 0.5);
  const auto set = dsl::compile_policy_text(
      "o.yaml", kHead + "params:\n  a: {float: 0.3, min: 0, max: 1}\nmerge: {method: d2o, ema_alpha: a, ema_beta: 1 - a}\n" + kScore,
      {{"a", "0.25"}});
  EXPECT_EQ(set.desc.merge.ema_alpha, 0.25);
  EXPECT_EQ(set.desc.merge.ema_beta, 0.75);
  EXPECT_EQ(load_policy("d2o")->description().merge.method, MergeMethod::D2o);
}

TEST(MergeMethodSettings, D2oErrorsNameTheKey) {
  const struct {
    std::string text, want;
  } cases[] = {
      {"merge: {method: d2o, ema_alpha: 1.5}", "o.yaml:3:33: error: 'ema_alpha' must be in 0..1, got 1.5"},
      {"merge: {method: d2o, ema_beta: -0.1}", "o.yaml:3:32: error: 'ema_beta' must be in 0..1, got -0.1"},
      {"merge: {method: pivot, ema_alpha: 0.5}",
       "o.yaml:3:35: error: 'ema_alpha' is a merge.method d2o setting; merge.method pivot does not read it"},
      {kDecode + "merge: {method: cam, ema_beta: 0.5}",
       "o.yaml:4:32: error: 'ema_beta' is a merge.method d2o setting; merge.method cam does not read it"},
      {"merge: {method: d2o, similarity_threshold: 0.5}",
       "o.yaml:3:44: error: 'similarity_threshold' is a nearest / pivot / weighted setting; merge.method d2o does not "
       "read it"},
      {"merge: {method: d2o, merge_budget: 3}",
       "o.yaml:3:36: error: 'merge_budget' is a merge.method cam setting; merge.method d2o does not read it"},
      {"select: {unfold_gqa: true}\nmerge: {method: d2o}",
       "o.yaml:4:17: error: merge.method d2o cannot be combined with select.unfold_gqa"},
  };
  for (const auto& c : cases) {
    const std::string e = usage_error(kHead + c.text + "\n" + kScore);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.text << "\n" << e;
  }
}

}  // namespace
}  // namespace kvevict
