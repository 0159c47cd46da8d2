// The `merge:` keys of merge-on-evict (merge.method, merge.similarity_threshold) as they reach the
// policy description, and their errors (golden messages with file:line:col). What the stage does
// is tested in tests/core/merge_on_evict_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

const std::string kHead = "name: o\nabout: x\n";
const std::string kScore = "score: |\n  score[t] = -key_norm[t]\n";

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("o.yaml", text);
}

TEST(MergeSettings, MethodAndThresholdReachTheDescription) {
  const auto none = dsl::compile_policy_text("o.yaml", kHead + kScore);
  EXPECT_FALSE(none.desc.merge.enabled);
  const auto codebook = dsl::compile_policy_text("o.yaml", kHead + "merge: {theta_key: 0.9}\n" + kScore);
  EXPECT_TRUE(codebook.desc.merge.enabled);
  EXPECT_EQ(codebook.desc.merge.method, MergeMethod::Codebook) << "a file without merge.method keeps its meaning";
  const auto pivot = dsl::compile_policy_text("o.yaml", kHead + "merge: {method: pivot}\n" + kScore);
  EXPECT_EQ(pivot.desc.merge.method, MergeMethod::Pivot);
  EXPECT_EQ(pivot.desc.merge.similarity_threshold, -1.0) << "default: no gate";
  const auto nearest = dsl::compile_policy_text(
      "o.yaml", kHead + "params:\n  m: {enum: [nearest, weighted], default: nearest}\n  s: {float: 0.25, min: 0, max: 1}\n"
                        "merge: {method: m, similarity_threshold: s}\n" + kScore,
      {{"m", "weighted"}});
  EXPECT_EQ(nearest.desc.merge.method, MergeMethod::Weighted);
  EXPECT_EQ(nearest.desc.merge.similarity_threshold, 0.25);
  EXPECT_EQ(load_policy("spindlekv")->description().merge.method, MergeMethod::Codebook);
  EXPECT_EQ(load_policy("merging_press")->description().merge.method, MergeMethod::Nearest);
  EXPECT_EQ(load_policy("look_m")->description().merge.method, MergeMethod::Pivot);
  EXPECT_EQ(load_policy("kvmerger")->description().merge.method, MergeMethod::Weighted);
}

TEST(MergeSettings, ErrorsNameTheKey) {
  const struct {
    std::string merge, want;
  } cases[] = {
      {"merge: {method: pivot, theta_key: 0.9}",
       "o.yaml:3:35: error: 'theta_key' is a codebook setting; merge.method pivot does not read it"},
      {"merge: {method: weighted, first_layer: 1}",
       "o.yaml:3:40: error: 'first_layer' is a codebook setting; merge.method weighted does not read it"},
      {"merge: {similarity_threshold: 0.5}",
       "o.yaml:3:31: error: 'similarity_threshold' is a merge-on-evict setting; merge.method codebook does not read it"},
      {"merge: {method: nearest, similarity_threshold: 2}",
       "o.yaml:3:48: error: 'similarity_threshold' is a cosine similarity threshold in -1..1"},
      {"merge: {method: average}",
       "o.yaml:3:17: error: 'method' must be one of codebook, nearest, pivot, weighted, cam, d2o (or an enum parameter with "
       "those options)"},
      {"select: {unfold_gqa: true}\nmerge: {method: pivot}",
       "o.yaml:4:17: error: merge.method pivot cannot be combined with select.unfold_gqa"},
      {"merge: {method: pivot, metod: pivot}", "unknown key 'metod' in the 'merge' section (allowed: ema_alpha, ema_beta, enabled, first_layer, "
                                               "last_layer, merge_budget, method, scope, similarity_threshold, theta_key, theta_value)"},
  };
  for (const auto& c : cases) {
    const std::string e = usage_error(kHead + c.merge + "\n" + kScore);
    EXPECT_NE(e.find(c.want), std::string::npos) << c.merge << "\n" << e;
  }
  // A disabled merge-on-evict section may sit beside unfold_gqa.
  EXPECT_EQ(usage_error(kHead + "select: {unfold_gqa: true}\nmerge: {method: pivot, enabled: false}\n" + kScore), "");
}

}  // namespace
}  // namespace kvevict
