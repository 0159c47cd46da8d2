// `kvevict generate --policy streamingllm --set position_mode=...` on stories260K as a user runs it:
// the CLI's greedy tokens equal an in-process greedy run of the engine with the same position mode,
// the two modes generate different text (the option reaches the decoder), and a bad value exits 2
// naming the parameter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"
#include "cli_run.h"
#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

constexpr int kNew = 40;

class PositionModeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
    prompt_ = ::testing::TempDir() + "/kvevict_position_prompt_" + std::to_string(::getpid()) + ".txt";
    std::ofstream(prompt_) << kvevict::test::kPolicyTestStory;
  }
  void TearDown() override { std::remove(prompt_.c_str()); }

  nlohmann::json generate(const std::string& mode) {
    const CliRun r = run_kvevict("generate -m " + model_ + " --prompt-file " + prompt_ + " -n " + std::to_string(kNew) +
                                 " --device cpu --threads 1 --policy streamingllm --budget 24 --set position_mode=" +
                                 mode + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }

  std::string model_, prompt_;
};

// Greedy decoding with the engine attached, as `generate` does.
std::vector<int> in_process(const std::vector<int>& prompt, const std::string& mode, int n) {
  using namespace kvevict;
  const auto model = load_model(test::stories_checkpoint());
  const auto program = load_policy("streamingllm", {{"position_mode", mode}});
  EvictionEngine engine(*program, model->config, {Budget::parse("24"), 0});
  auto decoder = make_cpu_decoder(*model, {.threads = 1});
  std::vector<float> logits = decoder->forward(std::span<const int>(prompt), &engine);
  std::vector<int> out;
  for (int i = 0; i < n; ++i) {
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (i + 1 < n) logits = decoder->forward(std::vector<int>{next}, &engine);
  }
  return out;
}

TEST_F(PositionModeCli, GenerateFollowsTheChosenPositionMode) {
  const nlohmann::json reassign = generate("reassign_in_cache");
  const nlohmann::json truepos = generate("true_positions");
  ASSERT_TRUE(reassign.contains("cache"));
  EXPECT_EQ(reassign["cache"]["tokens_max"], 24);
  EXPECT_EQ(reassign["cache"]["tokens_min"], 24);
  const auto prompt = reassign["prompt_tokens"].get<std::vector<int>>();
  const auto got = reassign["tokens"].get<std::vector<int>>();
  const auto got_true = truepos["tokens"].get<std::vector<int>>();
  ASSERT_FALSE(got.empty());
  EXPECT_NE(got, got_true) << "both position modes generated the same tokens";
  for (const auto& [mode, tokens] : {std::pair{std::string("reassign_in_cache"), got}, std::pair{std::string("true_positions"), got_true}}) {
    const std::vector<int> want = in_process(prompt, mode, static_cast<int>(tokens.size()));
    EXPECT_EQ(tokens, want) << mode;
  }
}

TEST_F(PositionModeCli, UnknownPositionModeExitsTwoNamingTheParameter) {
  const CliRun r = run_kvevict("generate -m " + model_ + " -p \"Once\" -n 2 --policy streamingllm --budget 8 "
                               "--set position_mode=rerotate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("position_mode"), std::string::npos) << r.err;
}

}  // namespace
