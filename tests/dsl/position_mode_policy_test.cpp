// The `run.reassign_positions` setting and streamingllm's `position_mode` parameter (spec §8
// `streaming.position_mode`): parsed, defaulted to the official code's re-assignment, switchable to
// true positions, recorded in the resolved parameters, and a non-boolean value is a file error.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict::dsl {
namespace {

TEST(PositionModePolicy, StreamingDefaultsToReassignmentAndRecordsTheMode) {
  const auto official = load_policy("streamingllm", {});
  EXPECT_TRUE(official->description().run.reassign_positions);
  EXPECT_EQ(official->description().params.at("position_mode"), "reassign_in_cache");
  const auto ports = load_policy("streamingllm", {{"position_mode", "true_positions"}});
  EXPECT_FALSE(ports->description().run.reassign_positions);
  EXPECT_EQ(ports->description().params.at("position_mode"), "true_positions");
  EXPECT_THROW(load_policy("streamingllm", {{"position_mode", "rerotate"}}), UsageError);
}

TEST(PositionModePolicy, RunSettingIsABooleanOffByDefault) {
  const std::string base = "name: p\nabout: x\nparams:\n  m: {enum: [a, b], default: a}\nscore: |\n  score[t] = pos[t]\n";
  EXPECT_FALSE(compile_policy_text("p.yaml", base).desc.run.reassign_positions);
  EXPECT_TRUE(compile_policy_text("p.yaml", base + "run: {reassign_positions: true}\n").desc.run.reassign_positions);
  const std::string by_param = base + "run:\n  reassign_positions: m == \"b\"\n";
  EXPECT_FALSE(compile_policy_text("p.yaml", by_param).desc.run.reassign_positions);
  EXPECT_TRUE(compile_policy_text("p.yaml", by_param, {{"m", "b"}}).desc.run.reassign_positions);
  try {
    compile_policy_text("p.yaml", base + "run: {reassign_positions: 3}\n");
    ADD_FAILURE() << "a number was accepted as reassign_positions";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("p.yaml:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict::dsl
