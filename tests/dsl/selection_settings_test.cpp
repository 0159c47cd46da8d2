// The selection settings beyond fixed top-k (select.threshold, select.score_at, select.stages with
// scores:, select.scope: model, select.layer_allocation: mass with select.mass) as they reach the
// policy description, and their errors (golden messages with file:line:col). What the engine does
// with them is tested in tests/core/selection_policies_test.cpp.
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

TEST(SelectionSettings, SettingsReachTheDescription) {
  const auto none = dsl::compile_policy_text("o.yaml", kHead + kScore);
  EXPECT_FALSE(none.desc.select.has_threshold);
  EXPECT_EQ(none.desc.select.score_at, ScoreAt::Eviction);
  EXPECT_TRUE(none.desc.select.stages.empty());
  const auto t = dsl::compile_policy_text(
      "o.yaml", kHead + "params:\n  th: {float: -2.5}\n  when: {enum: [eviction, insertion], default: insertion}\n"
                        "select: {threshold: th, score_at: when}\n" + kScore,
      {{"th", "-1.25"}});
  EXPECT_TRUE(t.desc.select.has_threshold);
  EXPECT_EQ(t.desc.select.threshold, -1.25);
  EXPECT_EQ(t.desc.select.score_at, ScoreAt::Insertion);
  const auto st = dsl::compile_policy_text(
      "o.yaml", kHead + "select:\n  stages:\n    - {score: b, keep: 0.5}\n    - {score: score}\n    - {score: a, keep: 0.25}\n"
                        "scores:\n  a: |\n    score[t] = pos[t]\n  b: |\n    score[t] = -pos[t]\n" + kScore);
  ASSERT_EQ(st.desc.select.stages.size(), 3u);
  EXPECT_EQ(st.desc.select.stages[0].program, 2);  // b is the second entry of scores:
  EXPECT_EQ(st.desc.select.stages[0].keep, 0.5);
  EXPECT_EQ(st.desc.select.stages[1].program, 0);
  EXPECT_EQ(st.desc.select.stages[1].keep, 0.0) << "no keep: the budget";
  EXPECT_EQ(st.desc.select.stages[2].program, 1);
  EXPECT_EQ(st.stage_scores.size(), 2u);
  const auto sh = dsl::compile_policy_text(
      "o.yaml", kHead + "select: {stages: [{score: a, share: 0.25}, {score: score}]}\nscores:\n  a: |\n    score[t] = pos[t]\n" + kScore);
  EXPECT_EQ(sh.desc.select.stages[0].share, 0.25);
  EXPECT_EQ(sh.desc.select.stages[1].share, 0.0);
  EXPECT_TRUE(st.desc.needs(TensorSignal::Position)) << "a stage program's signals are produced";
  const auto m = dsl::compile_policy_text("o.yaml", kHead + "select: {scope: model}\n" + kScore);
  EXPECT_EQ(m.desc.select.scope, SelectScope::Model);
  const auto mass = dsl::compile_policy_text("o.yaml", kHead + "select: {layer_allocation: mass, mass: 0.9}\n" + kScore);
  EXPECT_EQ(mass.desc.select.layer_allocation, LayerAllocation::Mass);
  EXPECT_DOUBLE_EQ(mass.desc.select.mass, 0.9f);
  const auto dms = load_policy("dms")->description();
  EXPECT_TRUE(dms.select.has_threshold);
  EXPECT_EQ(dms.select.score_at, ScoreAt::Insertion);
  EXPECT_EQ(dms.protect.recent, 128);
  EXPECT_EQ(dms.run.decode_every, 0);
  EXPECT_EQ(load_policy("dms", {{"decoding", "true"}})->description().run.decode_every, 1);
  EXPECT_EQ(load_policy("composed")->description().select.stages.size(), 2u);
}

TEST(SelectionSettings, ErrorsNameTheKey) {
  const struct {
    std::string text, want;
  } cases[] = {
      {"run: {decode_every: 1, decode_budget: \"prompt_len + decode_step\"}\nselect: {threshold: -1}\n",
       "o.yaml:4:21: error: 'threshold' is capped by --budget; run.decode_budget would let the cache grow without that "
       "cap while decoding"},
      {"select: {threshold: -1, scope: layer}\n", "o.yaml:3:21: error: 'threshold' needs scope kv_head or layer_shared"},
      {"select: {threshold: -1, random_share: 0.5}\n", "o.yaml:3:21: error: 'threshold' cannot be combined with a random share"},
      {"select: {threshold: \"1 / 0\"}\n", "o.yaml:3:21: error: 'threshold' must be a finite number, got inf"},
      {"run: {prefill_block: 16}\nselect: {score_at: insertion}\n",
       "o.yaml:4:20: error: 'score_at: insertion' keeps one frozen score per cache entry; a prefill in blocks would score "
       "old entries again"},
      {"select: {score_at: later}\n",
       "o.yaml:3:20: error: 'score_at' must be one of eviction, insertion (or an enum parameter with those options)"},
      {"run: {cascading: true}\nselect: {scope: model}\n",
       "o.yaml:4:17: error: 'scope: model' decides once, after every layer is prefilled; it cannot be combined with cascading"},
      {"run: {decode_every: 4}\nselect: {scope: model}\n",
       "o.yaml:4:17: error: 'scope: model' decides once, after every layer is prefilled; it cannot evict while decoding"},
      {"run: {decode_every: 4}\nselect: {stages: [{score: score, keep: 0.5}]}\n",
       "o.yaml:4:18: error: 'stages' cut each head once at prefill; they cannot evict while decoding"},
      {"select: {stages: [{score: nope}]}\n", "o.yaml:3:27: error: stage score 'nope' is neither 'score' nor a key of 'scores:'"},
      {"select: {stages: [{score: score, keep: 1.5}]}\n",
       "o.yaml:3:40: error: a stage's 'keep' is the share of its input it keeps, in (0, 1], got 1.5"},
      {"select: {stages: [{score: score, ratio: 0.5}]}\n",
       "o.yaml:3:34: error: unknown key 'ratio' in the stage (allowed: keep, score, share)"},
      {"select: {stages: [{score: score, share: 0.5}, {score: score, keep: 0.5}]}\n",
       "o.yaml:3:18: error: stages take either 'keep' (each of its input) or 'share' (of one budget), not both"},
      {"select: {stages: [{score: score, share: 0.5}, {score: score, share: 0.5}]}\n",
       "o.yaml:3:69: error: the last stage takes the rest of the budget; it has no 'share'"},
      {"select: {stages: [{score: score, share: 0.7}, {score: score, share: 0.6}, {score: score}]}\n",
       "o.yaml:3:18: error: the stages' shares add up to 1.3, more than the whole budget"},
      {"select: {stages: [{score: score, share: 0.5}]}\n",
       "o.yaml:3:18: error: 'share' splits one budget between stages; a single stage has nothing to share"},
      {"merge: {enabled: true, method: nearest}\nselect: {stages: [{score: score, keep: 0.5}]}\n",
       "o.yaml:4:18: error: 'stages' cut each head once at prefill; they cannot be combined with a merge-on-evict "
       "merge.method"},
      {"select: {stages: []}\n", "o.yaml:3:18: error: 'stages' must be a list of 1 to 8 stages like {score: NAME, keep: EXPR}"},
      {"scores:\n  a: |\n    score[t] = pos[t]\n", "o.yaml:4:3: error: score program 'a' is named by no stage of select.stages"},
      {"select: {layer_allocation: mass}\n",
       "o.yaml:3:28: error: 'layer_allocation: mass' needs 'mass: EXPR', the attention mass to reach (0 < mass <= 1)"},
      {"select: {mass: 0.9}\n", "o.yaml:3:16: error: 'mass' is read only with 'layer_allocation: mass'"},
      {"select: {layer_allocation: mass, mass: 1.5}\n", "o.yaml:3:40: error: 'mass' is a share of the attention mass in (0, 1], got 1.5"},
  };
  for (const auto& c : cases) {
    const std::string what = usage_error(kHead + c.text + kScore);
    EXPECT_NE(what.find(c.want), std::string::npos) << c.text << "\n" << what;
  }
}

// A stage program is a score program like `score`: its own syntax and signal errors point into it.
TEST(SelectionSettings, StageProgramsAreCheckedLikeScore) {
  const std::string text = kHead + "select: {stages: [{score: a}]}\nscores:\n  a: |\n    score[t] = sum(h: sum(q: A[h, q, t]))\n" + kScore;
  const std::string what = usage_error(text);
  EXPECT_NE(what.find("o.yaml:5:3: error: 'a' reads the window attention A, but the file has no 'observe: {window: ...}'"),
            std::string::npos)
      << what;
}

}  // namespace
}  // namespace kvevict
