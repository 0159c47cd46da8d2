// GPU checks: JIT-compiled kernels run on the device and are compared with the CPU. Every test
// skips, with the reason, when no usable CUDA device is present (CI has none); they run in
// scripts/device-check.sh on an accelerator machine.
#include <gtest/gtest.h>

#include <cmath>

#include "jit/cuda_driver.h"
#include "jit/gpu_score_kernel.h"
#include "jit/jit_compiler.h"
#include "jit/reference_kernels.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

#define KVEVICT_REQUIRE_GPU()                                                              \
  do {                                                                                     \
    const ::kvevict::jit::CudaProbe probe_ = ::kvevict::jit::CudaDriver::probe();          \
    if (!probe_.usable) GTEST_SKIP() << "no usable CUDA device: " << probe_.reason;        \
    KVEVICT_REQUIRE_NVRTC();                                                               \
    ::kvevict::jit::use_cuda_device(0);                                                    \
  } while (0)

struct Shape {
  int group, W, T;
};

float max_relative_error(const std::vector<float>& expected, const std::vector<float>& actual) {
  float worst = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    worst = std::max(worst, std::fabs(actual[i] - expected[i]) / std::max(1e-6f, std::fabs(expected[i])));
  return worst;
}

void check_indicator_on_device(const std::string& arch) {
  testing::TempDir cache_dir;
  KernelCache::Options options;
  options.dir = cache_dir.path();
  KernelCache cache(options);
  NvrtcRequest request;
  request.name = "cake_indicator.cu";
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = arch;
  const JitKernel compiled = compile_cached(request, cache, "cake-handwritten");
  GpuScoreKernel kernel(*compiled.entry, kCakeIndicatorEntry);
  const Shape shapes[] = {{1, 1, 1}, {4, 8, 5}, {4, 32, 257}, {4, 32, 32768}, {8, 16, 4099}};
  uint32_t seed = 11;
  for (const Shape& s : shapes) {
    testing::RandomScoreInputs random(s.group, s.W, s.T, seed++);
    std::vector<float> expected(s.T), actual(s.T, -1.0f);
    cake_indicator_reference(random.inputs, 200.0f, 5, expected.data());
    kernel.score(random.inputs, actual.data());
    const float error = max_relative_error(expected, actual);
    ::testing::Test::RecordProperty("max_relative_error_" + arch + "_T" + std::to_string(s.T), std::to_string(error));
    std::printf("[ kvevict  ] %s G=%d W=%d T=%d: max relative error %.3g\n", arch.c_str(), s.group, s.W, s.T, error);
    // Same float operations in the same order, -fmad=false: only libm-free arithmetic, so the
    // GPU and CPU results should agree to the last bits; 1e-5 leaves room for division rounding.
    EXPECT_LE(error, 1e-5f) << arch << " G=" << s.group << " W=" << s.W << " T=" << s.T;
  }
}

TEST(GpuKernels, HandWrittenIndicatorCubinMatchesTheCpu) {
  KVEVICT_REQUIRE_GPU();
  check_indicator_on_device(CudaDriver::instance().device_info(0).arch());
}

TEST(GpuKernels, HandWrittenIndicatorPtxMatchesTheCpu) {
  KVEVICT_REQUIRE_GPU();
  const CudaDeviceInfo info = CudaDriver::instance().device_info(0);
  check_indicator_on_device("compute_" + std::to_string(info.cc_major * 10 + info.cc_minor));
}

TEST(GpuKernels, LaunchErrorsAreReportedNotIgnored) {
  KVEVICT_REQUIRE_GPU();
  NvrtcRequest request;
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = CudaDriver::instance().device_info(0).arch();
  testing::TempDir cache_dir;
  KernelCache::Options options;
  options.dir = cache_dir.path();
  KernelCache cache(options);
  const JitKernel compiled = compile_cached(request, cache, "cake");
  CudaModule module(compiled.entry->payload.data(), compiled.entry->payload.size());
  EXPECT_THROW(module.function("no_such_kernel"), RuntimeError);
}

// Generated kernels of every built-in policy against the interpreter on the device:
// PolicyCodegen.EveryBuiltInPolicyMatchesTheInterpreterOnTheDevice (codegen_test.cpp).

}  // namespace
}  // namespace kvevict::jit
