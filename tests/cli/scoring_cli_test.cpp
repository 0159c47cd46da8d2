// `--scoring` on generate and inspect: the host-compiled generated kernels keep the same tokens and
// the same cache as the interpreter, and a backend the decoder's device cannot run exits 2 with a
// message (never a quiet switch to the interpreter).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_run.h"

#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

class ScoringCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
    prompt_ = ::testing::TempDir() + "/kvevict_scoring_prompt_" + std::to_string(::getpid()) + ".txt";
    std::ofstream(prompt_) << kvevict::test::kPolicyTestStory;
  }
  CliRun generate(const std::string& scoring) {
    return run_kvevict("generate -m " + model_ + " --prompt-file " + prompt_ +
                       " -n 12 --device cpu --policy h2o --budget 30% --json --scoring " + scoring);
  }
  std::string model_, prompt_;
};

TEST_F(ScoringCli, HostKernelsGenerateWhatTheInterpreterGenerates) {
  const CliRun interpreted = generate("interpreter");
  const CliRun host = generate("host");
  ASSERT_EQ(interpreted.exit_code, 0) << interpreted.err;
  ASSERT_EQ(host.exit_code, 0) << host.err;
  const auto a = nlohmann::json::parse(interpreted.out), b = nlohmann::json::parse(host.out);
  EXPECT_EQ(a["tokens"], b["tokens"]);
  EXPECT_EQ(a["cache"], b["cache"]);
  EXPECT_EQ(a["cache"]["selection"], "host");  // CPU scores: selected on the host (cuda scoring selects on the GPU)
  EXPECT_EQ(generate("auto").out, interpreted.out);  // auto on the CPU is the interpreter
}

TEST_F(ScoringCli, ABackendTheDeviceCannotRunIsAUsageError) {
  const CliRun cuda = generate("cuda");
  EXPECT_EQ(cuda.exit_code, 2);
  EXPECT_NE(cuda.err.find("--scoring cuda scores on the GPU the decoder runs on, but the decoder runs on the cpu"),
            std::string::npos)
      << cuda.err;
  const CliRun bad = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                                 " --policy knorm --budget 40 --scoring fast");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--scoring must be auto, interpreter, host or cuda, not 'fast'"), std::string::npos) << bad.err;
  const CliRun inspect_host = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ +
                                          " --policy knorm --budget 40 --json --scoring host");
  EXPECT_EQ(inspect_host.exit_code, 0) << inspect_host.err;
}

}  // namespace
