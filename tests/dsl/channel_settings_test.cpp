// The key-channel stage's policy-file keys (`channel_score`, `channels: {prune: EXPR}`;
// core/engine/channel_selection.h) as they reach the description, and their errors with golden
// messages (file:line:col). What the engine does with them: tests/core/channel_policies_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict {
namespace {

const std::string kHead = "name: o\nabout: x\nobserve: {window: 4}\n";
const std::string kScore = "score: |\n  score[t] = -key_norm[t]\n";
const std::string kThink = "channel_score: |\n  channel_score[d] = mean(h: mean(q: Q[h, q, d] ^ 2)) * mean(t: K[d, t] ^ 2)\n";

std::string usage_error(const std::string& text) {
  return dsl::test::policy_usage_error("o.yaml", text);
}

TEST(ChannelSettings, SettingsReachTheDescription) {
  const auto none = dsl::compile_policy_text("o.yaml", kHead + kScore);
  EXPECT_FALSE(none.desc.channels.enabled);
  EXPECT_LT(none.channel_score.output, 0);
  const auto dflt = dsl::compile_policy_text("o.yaml", kHead + kScore + kThink);
  EXPECT_TRUE(dflt.desc.channels.enabled);
  EXPECT_EQ(dflt.desc.channels.prune, 0.0) << "kvpress ThinKPress's default ratio";
  EXPECT_TRUE(dflt.desc.needs(TensorSignal::WindowQueryRows)) << "the channel program's signals are produced";
  EXPECT_TRUE(dflt.desc.needs(TensorSignal::Keys));
  const auto r = dsl::compile_policy_text("o.yaml", kHead + "params:\n  ratio: {fraction: 0.5, max: 0.9}\n" + kScore +
                                                        kThink + "channels: {prune: ratio}\n",
                                          {{"ratio", "0.25"}});
  EXPECT_EQ(r.desc.channels.prune, 0.25);
  const auto think = load_policy("think")->description();
  EXPECT_TRUE(think.channels.enabled);
  EXPECT_DOUBLE_EQ(think.channels.prune, 0.4f) << "KVCache-Factory's pruning_ratio";
  EXPECT_EQ(think.window, 32);
}

// The interpreter's channel_score: one value per channel, a scalar broadcast over d.
TEST(ChannelSettings, InterpreterWritesOneValuePerChannel) {
  const auto c = dsl::compile_policy_text("o.yaml", kHead + kScore + "channel_score: |\n  channel_score[d] = d * 2 + T\n");
  dsl::InterpretedPolicy p(c);
  ScoreInputs in;
  in.head_dim = 4;
  in.T = 3;
  float out[4] = {};
  p.channel_score(in, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 2.0f * i + 3.0f);
  const auto k = dsl::compile_policy_text("o.yaml", kHead + kScore + "channel_score: |\n  channel_score[d] = 7\n");
  dsl::InterpretedPolicy pk(k);
  pk.channel_score(in, out);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], 7.0f);
  dsl::InterpretedPolicy no(dsl::compile_policy_text("o.yaml", kHead + kScore));
  EXPECT_THROW(no.channel_score(in, out), RuntimeError);
}

TEST(ChannelSettings, ErrorsAtTheirKeys) {
  struct Case {
    std::string text, want;
  };
  const std::vector<Case> cases = {
      // The output must be over the channel axis d.
      {kHead + kScore + "channel_score: |\n  channel_score[t] = K[d, t]\n",
       "o.yaml:7:3: error: 'channel_score' must be declared per key channel: channel_score[d] = ..."},
      {kHead + kScore + "channel_score: |\n  channel_score = 1\n",
       "o.yaml:7:3: error: 'channel_score' must be declared per key channel: channel_score[d] = ..."},
      {kHead + kScore + "channel_score: |\n  x[d] = 1\n",
       "o.yaml:6:16: error: the program must define 'channel_score[d]' (one score per key channel)"},
      // A token axis left over: the checker's own rule (no implicit summation).
      {kHead + kScore + "channel_score: |\n  channel_score[d] = K[d, t]\n", "o.yaml:7:27: error: axis 't' is not bound here"},
      // The prune fraction.
      {kHead + kScore + kThink + "channels: {prune: 1}\n",
       "o.yaml:8:19: error: 'prune' is the fraction of key channels zeroed, in [0, 1), got 1"},
      {kHead + kScore + kThink + "channels: {prune: -0.1}\n",
       "o.yaml:8:19: error: 'prune' is the fraction of key channels zeroed, in [0, 1), got -0.1"},
      {kHead + kScore + kThink + "channels: {ratio: 0.5}\n", "o.yaml:8:12: error: unknown key 'ratio'"},
      {kHead + kScore + "channels: {prune: 0.5}\n",
       "o.yaml:6:11: error: 'channels' configures the channel_score stage, but the file has no 'channel_score' program"},
      // Combinations the stage cannot run (core/engine/channel_checks.h).
      {kHead + "run: {prefill: false, decode_every: 1}\n" + kScore + kThink,
       "o.yaml:4:16: error: channel_score (key-channel pruning at the end of prefill) needs 'prefill: true'"},
      {kHead + "select: {unfold_gqa: true}\n" + kScore + kThink,
       "o.yaml:4:22: error: channel_score (key-channel pruning at the end of prefill) cannot be combined with "
       "select.unfold_gqa"},
      {kHead + "run: {reassign_positions: true}\n" + kScore + kThink,
       "o.yaml:4:27: error: channel_score (key-channel pruning at the end of prefill) cannot be combined with "
       "run.reassign_positions"},
      {kHead + "merge: {enabled: true, method: nearest}\n" + kScore + kThink,
       "o.yaml:4:32: error: channel_score (key-channel pruning at the end of prefill) cannot be combined with a merge"},
      // Q needs an observation window.
      {"name: o\nabout: x\n" + kScore + kThink,
       "o.yaml:5:16: error: 'channel_score' reads the "},
  };
  for (const Case& c : cases) {
    const std::string what = usage_error(c.text);
    EXPECT_NE(what.find(c.want), std::string::npos) << c.text << "\n" << what;
  }
}

}  // namespace
}  // namespace kvevict
