// `--scoring` on generate and inspect: the host-compiled generated kernels keep the same tokens and
// the same cache as the interpreter, the JSON names the device and the backend, a backend the
// decoder's device cannot run exits 2 with a message (never a quiet switch to the interpreter), and
// on a GPU the whole pipeline runs there.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_run.h"

#include "../core/gpu_test_skip.h"
#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

nlohmann::json without_scoring(nlohmann::json cache) {
  cache.erase("scoring");
  return cache;
}

class ScoringCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
    prompt_ = ::testing::TempDir() + "/kvevict_scoring_prompt_" + std::to_string(::getpid()) + ".txt";
    std::ofstream(prompt_) << kvevict::test::kPolicyTestStory;
  }
  CliRun generate(const std::string& scoring, const std::string& device = "cpu") {
    return run_kvevict("generate -m " + model_ + " --prompt-file " + prompt_ + " -n 12 --device " + device +
                       " --policy h2o --budget 30% --json --scoring " + scoring);
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
  EXPECT_EQ(a["cache"]["scoring"], "interpreter");
  EXPECT_EQ(b["cache"]["scoring"], "host");
  EXPECT_EQ(without_scoring(a["cache"]), without_scoring(b["cache"]));
  EXPECT_EQ(a["cache"]["selection"], "host");  // CPU scores: selected on the host (cuda scoring selects on the GPU)
  EXPECT_EQ(a["device"], "cpu");
  // Nothing is read in place on the CPU: every count is there, and 0.
  for (const char* key :
       {"window_attention", "current_attention", "accumulated_attention", "cached_rows", "row_norms", "positions", "hidden_states",
        "selection_positions", "scores", "prefill_scores", "codebook_rows"})
    EXPECT_EQ(a["cache"]["in_place"][key], 0) << key;
  EXPECT_TRUE(a["cache"]["on_device"].is_null()) << "no device cache on the CPU";
  EXPECT_EQ(generate("auto").out, interpreted.out);  // auto on the CPU is the interpreter
}

// The whole generate pipeline on the GPU (GPU only): the CUDA decoder, the policy scored by the
// NVRTC kernels (`auto` on a GPU) and selected on the device; the same cache sizes as the CPU's
// interpreter run (h2o's budgets do not depend on scores). The tokens may differ where the CPU's
// top-2 logits are a near tie (cuda_decoder_test.cpp), so their agreement is printed, not asserted.
TEST_F(ScoringCli, CudaGeneratesOnTheDeviceWithTheGeneratedKernels) {
  SKIP_WITHOUT_GPU();
  const CliRun cpu = generate("interpreter");
  const CliRun gpu = generate("auto", "cuda");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto a = nlohmann::json::parse(cpu.out), b = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(b["device"].get<std::string>().rfind("cuda:", 0), 0u) << b["device"];
  EXPECT_EQ(b["cache"]["scoring"], "cuda");
  EXPECT_EQ(b["cache"]["selection"], "cuda");
  // The sizes depend on how many tokens were generated: a near tie may end one run at an end token
  // first (is_stop); they are compared when both generated as many.
  if (a["tokens"].size() == b["tokens"].size())
    for (const char* key : {"bytes", "bytes_full", "entries", "tokens_min", "tokens_max", "applications"})
      EXPECT_EQ(a["cache"][key], b["cache"][key]) << key;
  // H2O on the device: its accumulated attention held there and its decode scores selected there.
  EXPECT_GT(b["cache"]["in_place"]["accumulated_attention"].get<int64_t>(), 0) << b["cache"];
  EXPECT_GT(b["cache"]["in_place"]["scores"].get<int64_t>(), 0) << b["cache"];
  // ... and its prompt's scores held there for the prompt's selection (a per-head top-k at 30%).
  EXPECT_GT(b["cache"]["in_place"]["prefill_scores"].get<int64_t>(), 0) << b["cache"];
  // A dense cache: the device holds exactly what the policy's accounting says, and no codebook.
  EXPECT_EQ(b["cache"]["on_device"]["bytes"], b["cache"]["bytes"]) << b["cache"];
  EXPECT_EQ(b["cache"]["on_device"]["bytes_codebooks"], 0) << b["cache"];
  size_t same = 0;
  while (same < a["tokens"].size() && same < b["tokens"].size() && a["tokens"][same] == b["tokens"][same]) ++same;
  std::printf("generate --device cuda: the first %zu of %zu tokens equal the CPU's\n", same, a["tokens"].size());
}

// SpindleKV on the GPU (GPU only): its decode steps' rows are matched against the codebooks the
// device holds (cache.in_place.codebook_rows; docs/CUDA.md "SpindleKV's codebook on the device"),
// none on the CPU; the same entries as the CPU's run (its pyramid budgets do not depend on scores).
TEST_F(ScoringCli, CudaSpindleKVMatchesItsDecodedRowsOnTheDevice) {
  SKIP_WITHOUT_GPU();
  const std::string command = "generate -m " + model_ + " --prompt-file " + prompt_ +
                              " -n 12 --policy spindlekv --budget 50% --json --device ";
  const CliRun cpu = run_kvevict(command + "cpu"), gpu = run_kvevict(command + "cuda");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  const auto a = nlohmann::json::parse(cpu.out), b = nlohmann::json::parse(gpu.out);
  EXPECT_EQ(a["cache"]["in_place"]["codebook_rows"], 0);
  EXPECT_GT(b["cache"]["in_place"]["codebook_rows"].get<int64_t>(), 0) << b["cache"];
  if (a["tokens"].size() == b["tokens"].size())  // as above: the entries follow the tokens generated
    EXPECT_EQ(a["cache"]["entries"], b["cache"]["entries"]);
  // The device holds the reconstructions dense (its bytes: every entry's row) beside its books.
  EXPECT_GT(b["cache"]["on_device"]["bytes_codebooks"].get<int64_t>(), 0) << b["cache"];
  EXPECT_GT(b["cache"]["on_device"]["bytes"].get<int64_t>(), 0) << b["cache"];
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
