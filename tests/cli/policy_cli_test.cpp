// `kvevict inspect` and `kvevict generate --policy` as a user runs them: the JSON shape, kept sets
// that honour the budget and the protected window, the cache held at its budget while generating,
// the tutorial's example policy (docs/WRITING_POLICIES.md), and bad policy options exiting 2 with
// a message that names the problem.
#include <gtest/gtest.h>

#include "cli_run.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

std::string prompt_file() {
  const std::string path = ::testing::TempDir() + "/kvevict_policy_prompt_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << kvevict::test::kPolicyTestStory;
  return path;
}

std::string example_policy() { return std::string(KVEVICT_TEST_SOURCE_DIR) + "/../policies/examples/recent_low_knorm.yaml"; }

class PolicyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
    prompt_ = prompt_file();
  }
  std::string model_, prompt_;
};

TEST_F(PolicyCli, InspectJsonKeepsTheBudgetAndTheWindow) {
  const CliRun r = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                               " --policy snapkv --budget 40 --set window=8 --set kernel=7 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["policy"], "snapkv");
  EXPECT_EQ(j["budget"], "40");
  const int S = j["prompt_tokens"];
  EXPECT_GT(S, 200);
  ASSERT_EQ(j["layers"].size(), 5u);  // stories260K: 5 layers, 4 KV heads
  for (const auto& layer : j["layers"]) {
    ASSERT_EQ(layer["heads"].size(), 4u);
    for (const auto& head : layer["heads"]) {
      EXPECT_EQ(head["budget"], 40);
      const std::vector<int> kept = head["kept"];
      ASSERT_EQ(kept.size(), 40u);
      EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
      EXPECT_EQ(std::set<int>(kept.begin(), kept.end()).size(), kept.size());
      for (int p = S - 8; p < S; ++p) EXPECT_EQ(std::count(kept.begin(), kept.end(), p), 1) << "window token " << p;
    }
  }
  const double full = j["bytes_full"], kept = j["bytes_kept"];
  EXPECT_NEAR(kept / full, 40.0 / S, 0.02 * 40.0 / S);
}

TEST_F(PolicyCli, InspectJsonWithUnfoldedGqaListsQueryHeads) {
  // gqa_mode = unfold: one stored head per query head (stories260K: 8 query heads, G = 2); each
  // head object's "kv_head" is the stored head's index, i.e. the query head, with its source KV head.
  const CliRun r = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                               " --policy spindlekv --budget 40% --set gqa_mode=unfold --set codebook=false --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["gqa_mode"], "unfold");
  ASSERT_EQ(j["layers"].size(), 5u);
  size_t entries = 0;
  for (const auto& layer : j["layers"]) {
    ASSERT_EQ(layer["heads"].size(), 8u);
    for (size_t h = 0; h < 8; ++h) {
      const auto& head = layer["heads"][h];
      EXPECT_EQ(head["kv_head"], h);
      EXPECT_EQ(head["query_head"], h);
      EXPECT_EQ(head["source_kv_head"], h / 2);
      entries += head["kept"].size();
    }
  }
  // Bytes as stored: every kept entry of every query head, K and V in the default f16 cache
  // (2 bytes per element) plus an int32 position: 2 * 2 d + 4 bytes each (d = 8).
  EXPECT_EQ(j["bytes_kept"].get<size_t>(), entries * (2 * 2 * 8 + 4));
  const CliRun folded = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                                    " --policy spindlekv --budget 40% --set codebook=false --json");
  ASSERT_EQ(folded.exit_code, 0) << folded.err;
  EXPECT_EQ(nlohmann::json::parse(folded.out)["gqa_mode"], "kv_head");
}

TEST_F(PolicyCli, InspectTextListsEveryHead) {
  const CliRun r = run_kvevict("inspect -m " + model_ + " -p \"Once upon a time there was a cat. The cat liked milk.\"" +
                               " --policy streamingllm --budget 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layer 4 kv_head 3 budget 8 kept 8: 0 1 2 3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cache bytes: full "), std::string::npos) << r.out;
}

TEST_F(PolicyCli, GenerateWithAPolicyHoldsTheCacheAtItsBudget) {
  const CliRun r = run_kvevict("generate -m " + model_ + " --prompt-file " + prompt_ +
                               " -n 60 --temperature 1 --seed 3 --policy streamingllm --budget 32 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("cache")) << r.out;
  EXPECT_EQ(j["cache"]["tokens_max"], 32);
  EXPECT_EQ(j["cache"]["tokens_min"], 32);
  EXPECT_LT(j["cache"]["bytes"].get<double>(), j["cache"]["bytes_full"].get<double>());
  const CliRun text = run_kvevict("generate -m " + model_ + " --prompt-file " + prompt_ + " -n 5 --policy cake --budget 30%");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("cache (cake, budget 30%): "), std::string::npos) << text.err;
}

TEST_F(PolicyCli, TutorialPolicyChecksAndRunsUnderInspect) {
  const CliRun c = run_kvevict("check " + example_policy());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("ok: recent_low_knorm"), std::string::npos) << c.out;
  const CliRun r = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ + " --policy " + example_policy() +
                               " --budget 48 --set recent=16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const int S = j["prompt_tokens"];
  for (const auto& layer : j["layers"])
    for (const auto& head : layer["heads"]) {
      const std::vector<int> kept = head["kept"];
      ASSERT_EQ(kept.size(), 48u);
      for (int p : {0, 1, 2, 3}) EXPECT_EQ(std::count(kept.begin(), kept.end(), p), 1) << "sink " << p;
      for (int p = S - 16; p < S; ++p) EXPECT_EQ(std::count(kept.begin(), kept.end(), p), 1) << "recent " << p;
    }
  // Found by name through --policy-path too.
  const std::string dir = std::string(KVEVICT_TEST_SOURCE_DIR) + "/../policies/examples";
  EXPECT_EQ(run_kvevict("inspect -m " + model_ + " -p \"Once upon a time\" --policy recent_low_knorm --policy-path " +
                        dir + " --budget 4 --set recent=2")
                .exit_code,
            0);
}

struct BadCase {
  std::string args;
  std::string message;
};

TEST_F(PolicyCli, BadPolicyOptionsExitTwoWithAClearMessage) {
  const std::string base = "-m " + model_ + " --prompt-file " + prompt_;
  const std::vector<BadCase> cases = {
      {"--policy snapkv --budget 40 --set window=-3", "window"},
      {"--policy snapkv --budget 40 --set no_such_param=1", "no_such_param"},
      {"--policy snapkv --budget 40 --set window", "name=value"},
      {"--policy snapkv --budget 40 --set pool=median", "median"},
      {"--policy no_such_policy --budget 40", "no_such_policy"},
      {"--policy snapkv --budget 100000", "above the prompt"},
      {"--policy snapkv --budget lots", "lots"},
      {"--policy snapkv --budget 0%", "0%"},
  };
  for (const std::string cmd : {"inspect", "generate -n 2"}) {
    for (const BadCase& c : cases) {
      const CliRun r = run_kvevict(std::string(cmd) + " " + base + " " + c.args);
      EXPECT_EQ(r.exit_code, 2) << cmd << " " << c.args << "\n" << r.err;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << cmd << " " << c.args << "\n" << r.err;
      EXPECT_TRUE(r.out.empty() || cmd != std::string("inspect")) << r.out;
    }
  }
  EXPECT_EQ(run_kvevict("generate -m " + model_ + " -n 2 --budget 40").exit_code, 2);
  EXPECT_EQ(run_kvevict("inspect -m " + model_ + " --policy snapkv --budget 40").exit_code, 2);  // no prompt
}

TEST_F(PolicyCli, BudgetUnitsAndKeptOrderOnTheCommandLine) {
  // stories260K: 5 layers x 4 KV heads, so total:800 is 40 per (layer, KV head).
  const CliRun total = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                                   " --policy snapkv --budget total:800 --set window=8 --set kept_order=score --json");
  ASSERT_EQ(total.exit_code, 0) << total.err;
  const auto j = nlohmann::json::parse(total.out);
  EXPECT_EQ(j["budget"], "total:800");
  for (const auto& layer : j["layers"])
    for (const auto& head : layer["heads"]) EXPECT_EQ(head["budget"], 40);
  const CliRun odd = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ + " --policy snapkv --budget total:801");
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find("total:801 is not a multiple of the model's 4 KV heads"), std::string::npos) << odd.err;
  const CliRun bad = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ + " --policy snapkv --budget total:x");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--budget"), std::string::npos) << bad.err;
  EXPECT_EQ(run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                        " --policy snapkv --budget 40 --set kept_order=sideways").exit_code, 2);
}

}  // namespace
