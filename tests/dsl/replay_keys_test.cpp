// observe.replay and A_replay (KVzip; core/engine/replay_checks.h): the loader reads the key's
// settings, and every combination the engine cannot run is an error at its file:line:col.
#include <gtest/gtest.h>

#include <string>

#include "core/util/error.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl {
namespace {

const char* kScore = "score: |\n  score[t] = max(h: A_replay[h, t])\n";

// The error text of compiling `text`, or "" when it compiles.
std::string error_of(const std::string& text) {
  try {
    compile_policy_text("kvzip.yaml", text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

void expect_error_at(const std::string& text, const std::string& at, const std::string& words) {
  const std::string what = error_of(text);
  EXPECT_NE(what.find("kvzip.yaml:" + at + ": error"), std::string::npos) << "want " << at << ", got:\n" << what;
  EXPECT_NE(what.find(words), std::string::npos) << "want '" << words << "', got:\n" << what;
}

TEST(ReplayKeys, DefaultsAndSettingsAreRead) {
  const CompiledPolicy d = compile_policy_text(
      "kvzip.yaml", std::string("name: k\nabout: a\nobserve: {replay: {}}\nselect: {scope: model}\n") + kScore);
  EXPECT_TRUE(d.desc.observe.replay.enabled);
  EXPECT_EQ(d.desc.observe.replay.chunk, 2048);
  EXPECT_EQ(d.desc.observe.replay.previous_tail, 8);
  EXPECT_EQ(d.desc.observe.replay.n_sink, 4);
  EXPECT_FALSE(d.desc.observe.replay.normalise);
  EXPECT_TRUE(d.desc.needs(TensorSignal::ReplayAttention));
  const CompiledPolicy e = compile_policy_text(
      "kvzip.yaml", std::string("name: k\nabout: a\nparams:\n  c: {int: 100}\n"
                                "observe: {replay: {chunk: c, previous_tail: 3, n_sink: 0, normalise: true}}\n"
                                "select: {scope: layer}\n") + kScore);
  EXPECT_EQ(e.desc.observe.replay.chunk, 100);
  EXPECT_EQ(e.desc.observe.replay.previous_tail, 3);
  EXPECT_EQ(e.desc.observe.replay.n_sink, 0);
  EXPECT_TRUE(e.desc.observe.replay.normalise);
}

TEST(ReplayKeys, BadValuesAreErrorsAtTheirKey) {
  const std::string head = "name: k\nabout: a\nselect: {scope: model}\nobserve:\n  replay: ";
  expect_error_at(head + "{chunk: 0}\n" + kScore, "5:19", "'chunk' must be a whole number between 1 and 65536");
  expect_error_at(head + "{chunk: 70000}\n" + kScore, "5:19", "'chunk' must be a whole number");
  expect_error_at(head + "{chunk: 2.5}\n" + kScore, "5:19", "'chunk' must be a whole number");
  expect_error_at(head + "{n_sink: -1}\n" + kScore, "5:20", "'n_sink' must be a whole number");
  expect_error_at(head + "{chunk: 4, previous_tail: 5}\n" + kScore, "5:37", "must not exceed 'chunk'");
  expect_error_at(head + "{previous_tail: 2000}\n" + kScore, "5:27", "'previous_tail' must be a whole number between 0 and 1024");
  expect_error_at(head + "{chunks: 4}\n" + kScore, "5:12", "unknown key 'chunks' in the 'observe.replay' mapping");
  expect_error_at(head + "true\n" + kScore, "5:11", "'replay' must be a mapping");
}

TEST(ReplayKeys, TheSignalAndTheKeyNeedEachOther) {
  expect_error_at("name: k\nabout: a\nselect: {scope: model}\n" + std::string(kScore), "4:8",
                  "A_replay (KVzip's context replay) needs 'observe: {replay: {...}}'");
  expect_error_at("name: k\nabout: a\nobserve: {replay: {}}\nselect: {scope: model}\nscore: |\n  score[t] = pos[t]\n", "3:19",
                  "no program reads A_replay");
}

TEST(ReplayKeys, CombinationsTheReplayCannotRunAreErrorsAtTheirKey) {
  const std::string head = "name: k\nabout: a\nobserve: {replay: {}}\n";
  expect_error_at(head + "select: {scope: kv_head}\n" + kScore, "4:17", "it needs select.scope model");
  expect_error_at(head + "select: {scope: layer_shared}\n" + kScore, "4:17", "it needs select.scope model");
  expect_error_at(head + kScore, "1:1", "it needs select.scope model");  // the default scope, no select section
  expect_error_at(head + "select: {scope: layer}\nrun: {prefill_block: 16}\n" + kScore, "5:22",
                  "cannot be combined with run.prefill_block");
  expect_error_at(head + "select: {scope: layer}\nrun: {cascading: true}\n" + kScore, "5:18",
                  "cannot be combined with cascading");
  expect_error_at(head + "select: {scope: layer}\nrun: {decode_every: 4}\n" + kScore, "5:21",
                  "decode triggers would read stale replay scores");
  expect_error_at(head + "select: {scope: layer, layer_allocation: mass, mass: 0.9}\n" + kScore, "4:42",
                  "A_replay cannot be combined with select.layer_allocation");
}

}  // namespace
}  // namespace kvevict::dsl
