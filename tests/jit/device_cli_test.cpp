// Device resolution without a driver, and the JIT subcommands through the real kvevict binary
// (exit codes and messages): devices, compile, cache list|clear.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "core/decode/make_decoder.h"
#include "core/util/error.h"
#include "jit/codegen.h"
#include "jit/device.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs kvevict with `env` assignments prefixed (e.g. "KVEVICT_CACHE_DIR=/x").
CliRun run_kvevict(const std::string& env, const std::string& args, const std::string& scratch) {
  const std::string out = scratch + "/stdout", err = scratch + "/stderr";
  const std::string command = env + " " + KVEVICT_BINARY + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(command.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read_text(out);
  run.err = read_text(err);
  return run;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string kNoDriver = "KVEVICT_CUDA_DRIVER=/nonexistent/libcuda.so.1";

TEST(DeviceResolution, WithoutADriverAutoFallsBackToTheCpuAndSaysSoOnce) {
  testing::ScopedEnv no_driver("KVEVICT_CUDA_DRIVER", "/nonexistent/libcuda.so.1");
  reset_device_notice_for_tests();
  std::ostringstream notes;
  const DeviceChoice first = resolve_device("auto", &notes);
  const DeviceChoice second = resolve_device("auto", &notes);
  EXPECT_EQ(first.kind, DeviceKind::Cpu);
  EXPECT_EQ(second.kind, DeviceKind::Cpu);
  EXPECT_FALSE(first.note.empty());
  EXPECT_EQ(count(notes.str(), "running on the CPU"), 1u) << notes.str();
  EXPECT_EQ(resolve_device("cpu", &notes).kind, DeviceKind::Cpu);
  EXPECT_EQ(target_arch("", first), "sm_80");
  EXPECT_EQ(target_arch("sm_90", first), "sm_90");
}

TEST(DeviceResolution, CudaWithoutADriverIsARuntimeErrorAndBadValuesAreUsageErrors) {
  testing::ScopedEnv no_driver("KVEVICT_CUDA_DRIVER", "/nonexistent/libcuda.so.1");
  try {
    resolve_device("cuda");
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_device("cuda:1"), RuntimeError);
  EXPECT_THROW(resolve_device("gpu"), UsageError);
  EXPECT_THROW(resolve_device("cuda:"), UsageError);
  EXPECT_THROW(resolve_device("cuda:x"), UsageError);
}

// A driver library that lacks one entry point is refused naming it, even when another entry point
// was found under its older name (the fallback forgets only its own miss).
TEST(CudaDriverBinding, AnOldDriverMissingAnEntryPointIsRefusedNamingIt) {
  testing::ScopedEnv old_driver("KVEVICT_CUDA_DRIVER", KVEVICT_FAKE_OLD_CUDA_DRIVER);
  try {
    resolve_device("cuda");
    FAIL() << "a driver without cuMemsetD8_v2 was accepted";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing cuMemsetD8_v2"), std::string::npos) << what;
    EXPECT_EQ(what.find("cuEventElapsedTime"), std::string::npos) << what << ": the older name was there";
  }
}

TEST(JitCli, DeviceCudaWithoutADriverExitsOneWithAClearMessage) {
  testing::TempDir scratch;
  const CliRun run = run_kvevict(kNoDriver, "devices --device cuda", scratch.path());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("--device cuda requested, but no usable CUDA device"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("not installed"), std::string::npos) << run.err;
}

TEST(JitCli, DeviceAutoWithoutADriverRunsOnTheCpuAndSaysSoOnce) {
  testing::TempDir scratch;
  const CliRun run = run_kvevict(kNoDriver, "devices --device auto", scratch.path());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(count(run.err, "running on the CPU"), 1u) << run.err;
  EXPECT_NE(run.out.find("--device auto -> cpu"), std::string::npos) << run.out;
}

TEST(JitCli, BadDeviceValueIsAUsageError) {
  testing::TempDir scratch;
  const CliRun run = run_kvevict(kNoDriver, "devices --device tpu", scratch.path());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("invalid --device 'tpu'"), std::string::npos) << run.err;
}

class CompileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!NvrtcLibrary::available(&why)) GTEST_SKIP() << "NVRTC is not available: " << why;
    env_ = kNoDriver + " KVEVICT_CACHE_DIR=" + cache_.path();
    source_path_ = scratch_.path() + "/add_one.cu";
    std::ofstream(source_path_) << "extern \"C\" __global__ void add_one(float* x, int n) {\n"
                                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                   "  if (i < n) x[i] += 1.0f;\n}\n";
  }
  CliRun kvevict(const std::string& args) { return run_kvevict(env_, args, scratch_.path()); }

  testing::TempDir scratch_, cache_;
  std::string env_, source_path_;
};

TEST_F(CompileCli, PrintsTheSourceCompilesOnceThenHitsTheCache) {
  const CliRun first = kvevict("compile " + source_path_);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(first.out, read_text(source_path_));
  EXPECT_NE(first.err.find("for sm_80"), std::string::npos) << "no GPU: sm_80 by default; " << first.err;
  EXPECT_NE(first.err.find("compiled now"), std::string::npos) << first.err;
  const CliRun second = kvevict("compile " + source_path_);
  EXPECT_NE(second.err.find("from the kernel cache"), std::string::npos) << second.err;
  const CliRun listed = kvevict("cache list");
  EXPECT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("(1 entry)"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("sm_80"), std::string::npos) << listed.out;
  const CliRun cleared = kvevict("cache clear");
  EXPECT_NE(cleared.out.find("removed 1 file"), std::string::npos) << cleared.out;
  EXPECT_NE(kvevict("cache list").out.find("(0 entries)"), std::string::npos);
}

TEST_F(CompileCli, EmitsPtxForTheRequestedArchitectureIntoAFile) {
  const std::string output = scratch_.path() + "/out.ptx";
  const CliRun run = kvevict("compile " + source_path_ + " --emit ptx --arch sm_90 -o " + output);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(run.out.empty());
  const std::string ptx = read_text(output);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find(".entry add_one"), std::string::npos) << ptx;
}

TEST_F(CompileCli, CompileErrorsExitTwoAndCiteTheSourceLine) {
  std::ofstream(source_path_, std::ios::app) << "#line 12 \"policies/mine.yaml\"\nint broken(\n";
  const CliRun run = kvevict("compile " + source_path_);
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("policies/mine.yaml(12)"), std::string::npos) << run.err;
}

TEST_F(CompileCli, BadArchitectureAndMissingFileAreUsageErrors) {
  EXPECT_EQ(kvevict("compile " + source_path_ + " --arch sm80").exit_code, 2);
  EXPECT_EQ(kvevict("compile " + source_path_ + " --arch sm_10").exit_code, 2);
  const CliRun missing = kvevict("compile " + scratch_.path() + "/absent.cu");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("absent.cu: cannot open"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace kvevict::jit

namespace kvevict::jit {
namespace {

TEST_F(CompileCli, BuiltInPolicyPrintsItsGeneratedCuda) {
  if (!code_generator_available()) GTEST_SKIP() << "no code generator in this build";
  const CliRun run = kvevict("compile cake --set gamma=100");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("KVEVICT_SCORE_ENTRY(kvevict_score"), std::string::npos);
  EXPECT_NE(run.out.find("KVEVICT_SCORE_ENTRY(kvevict_decode_score"), std::string::npos);
  EXPECT_NE(run.out.find("cake.yaml\""), std::string::npos) << "#line directives name the policy file";
  EXPECT_NE(run.err.find("compiled cake.cu for sm_80"), std::string::npos) << run.err;
  const CliRun bad = kvevict("compile cake --set no_such_param=1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_EQ(kvevict("compile no-such-policy").exit_code, 2);
}

}  // namespace
}  // namespace kvevict::jit

namespace kvevict::jit {
namespace {

TEST_F(CompileCli, PolicyWithTokenReductionsEmitsStageKernels) {
  if (!code_generator_available()) GTEST_SKIP() << "no code generator in this build";
  // A sum over tokens and a normalise in the decode indicator: the PTX carries the stage entry.
  const std::string policy = scratch_.path() + "/staged.yaml";
  std::ofstream(policy) << "name: staged\nabout: token reductions\nscore: |\n  score[t] = -key_norm[t]\n"
                           "decode_score: |\n  s = sum(t: key_norm[t])\n  score[t] = normalise(key_norm[t]) * s\n";
  const std::string output = scratch_.path() + "/staged.ptx";
  const CliRun run = kvevict("compile " + policy + " --arch sm_90 --emit ptx -o " + output);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string ptx = read_text(output);
  EXPECT_NE(ptx.find(".entry kvevict_decode_score_stages"), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find(".entry kvevict_score_stages"), std::string::npos) << "the prefill indicator needs no stage";
}

// The one skip reason of the GPU tests and benchmarks: empty exactly when a CUDA build sees a
// usable device, and otherwise it names which of the two is missing.
TEST(DeviceResolution, CudaUnavailableReasonNamesWhatIsMissing) {
  const std::string why = cuda_unavailable_reason();
  if (!cuda_decoder_built()) {
    EXPECT_EQ(why, "this kvevict was built without the CUDA toolkit");
    return;
  }
  const CudaProbe probe = CudaDriver::probe();
  if (probe.usable) EXPECT_EQ(why, "");
  else EXPECT_EQ(why, "no usable CUDA device: " + probe.reason);
}

}  // namespace
}  // namespace kvevict::jit
