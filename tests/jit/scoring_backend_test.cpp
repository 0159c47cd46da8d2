// The one choice of scoring backend (jit/scoring_backend.h): how requests resolve against the
// decoder's device, that each backend builds the program it names, and that a backend the device
// cannot run is refused rather than replaced by the interpreter.
#include "jit/scoring_backend.h"

#include <gtest/gtest.h>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "jit/cuda_driver.h"
#include "jit/jit_policy_program.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

DeviceChoice cuda_device() {
  DeviceChoice d;
  d.kind = DeviceKind::Cuda;
  d.ordinal = 0;
  return d;
}

std::string usage_error_of(std::string_view request, const DeviceChoice& device) {
  try {
    resolve_scoring(request, device, "--scoring");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ScoringBackend, AutoFollowsTheDecodersDeviceAndExplicitChoicesAreKept) {
  const DeviceChoice cpu;
  EXPECT_EQ(resolve_scoring("auto", cpu, "--scoring"), ScoringBackend::Interpreter);
  EXPECT_EQ(resolve_scoring("auto", cuda_device(), "--scoring"), ScoringBackend::CudaKernel);
  EXPECT_EQ(resolve_scoring("interpreter", cuda_device(), "--scoring"), ScoringBackend::Interpreter);
  EXPECT_EQ(resolve_scoring("host", cpu, "--scoring"), ScoringBackend::HostKernel);
  EXPECT_EQ(resolve_scoring("host", cuda_device(), "--scoring"), ScoringBackend::HostKernel);
  EXPECT_EQ(resolve_scoring("cuda", cuda_device(), "--scoring"), ScoringBackend::CudaKernel);
  for (ScoringBackend b : {ScoringBackend::Interpreter, ScoringBackend::HostKernel, ScoringBackend::CudaKernel}) {
    ScoringBackend parsed{};
    ASSERT_TRUE(parse_mode(mode_name(b), parsed));
    EXPECT_EQ(parsed, b);
  }
}

TEST(ScoringBackend, CudaOnACpuDecoderAndUnknownNamesAreUsageErrors) {
  EXPECT_EQ(usage_error_of("cuda", DeviceChoice{}),
            "--scoring cuda scores on the GPU the decoder runs on, but the decoder runs on the cpu (choose interpreter "
            "or host, or run the decoder on a CUDA device)");
  EXPECT_EQ(usage_error_of("gpu", DeviceChoice{}), "--scoring must be auto, interpreter, host or cuda, not 'gpu'");
  EXPECT_EQ(usage_error_of("", DeviceChoice{}), "--scoring must be auto, interpreter, host or cuda, not ''");
}

TEST(ScoringBackend, EachBackendBuildsTheProgramItNames) {
  const DeviceChoice cpu;
  auto interpreted = load_scored_policy("cake", {}, {}, ScoringBackend::Interpreter, cpu);
  EXPECT_NE(dynamic_cast<const dsl::InterpretedPolicy*>(interpreted.get()), nullptr);
  auto host = load_scored_policy("cake", {}, {}, ScoringBackend::HostKernel, cpu);
  EXPECT_NE(dynamic_cast<const JitPolicyProgram*>(host.get()), nullptr);
  EXPECT_EQ(host->description().name, interpreted->description().name);
  // Same scores from the generated kernel as from the interpreter, prefill and decode indicators.
  uint32_t seed = 11;
  for (int T : {1, 9, 257}) {
    testing::RandomScoreInputs random(4, 8, T, seed++);
    for (bool decoding : {false, true}) {
      std::vector<float> expected(T), actual(T);
      interpreted->score(random.inputs, decoding, expected.data());
      host->score(random.inputs, decoding, actual.data());
      for (int t = 0; t < T; ++t) ASSERT_NEAR(actual[t], expected[t], 1e-5f * std::max(1.0f, std::fabs(expected[t])));
    }
  }
  // No quiet fallback: CUDA scoring with the decoder on the CPU is refused by the builder too.
  EXPECT_THROW(load_scored_policy("cake", {}, {}, ScoringBackend::CudaKernel, cpu), UsageError);
}

TEST(ScoringBackend, CudaKernelsScoreOnTheGpuWhenOneIsPresent) {
  const CudaProbe probe = CudaDriver::probe();
  if (!probe.usable) GTEST_SKIP() << "no usable CUDA device: " << probe.reason;
  DeviceChoice gpu = cuda_device();
  gpu.info = probe.devices[0];
  auto on_gpu = load_scored_policy("cake", {}, {}, ScoringBackend::CudaKernel, gpu);
  auto interpreted = load_scored_policy("cake", {}, {}, ScoringBackend::Interpreter, gpu);
  EXPECT_NE(dynamic_cast<const JitPolicyProgram*>(on_gpu.get()), nullptr);
  testing::RandomScoreInputs random(4, 8, 300, 21);
  std::vector<float> expected(300), actual(300);
  interpreted->score(random.inputs, false, expected.data());
  on_gpu->score(random.inputs, false, actual.data());
  for (int t = 0; t < 300; ++t) ASSERT_NEAR(actual[t], expected[t], 1e-4f * std::max(1.0f, std::fabs(expected[t])));
}

}  // namespace
}  // namespace kvevict::jit
