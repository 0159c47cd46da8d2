// NVRTC opened at run time compiles a hand-written kernel for sm_80 and sm_90 (no GPU needed).
#include "jit/nvrtc_library.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/util/error.h"
#include "dsl/policy_loader.h"
#include "jit/codegen.h"
#include "jit/reference_kernels.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

TEST(Nvrtc, ReportsAVersion) {
  KVEVICT_REQUIRE_NVRTC();
  const NvrtcLibrary& nvrtc = NvrtcLibrary::instance();
  EXPECT_GE(nvrtc.version_major(), 11);
  EXPECT_FALSE(nvrtc.path().empty());
}

class NvrtcArch : public ::testing::TestWithParam<const char*> {};

TEST_P(NvrtcArch, CompilesTheHandWrittenIndicatorToCubin) {
  KVEVICT_REQUIRE_NVRTC();
  NvrtcRequest request;
  request.name = "cake_indicator.cu";
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = GetParam();
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  ASSERT_TRUE(result.ok) << result.log;
  EXPECT_EQ(result.kind, BinaryKind::Cubin);
  ASSERT_GT(result.binary.size(), 4u);
  // A cubin is an ELF file.
  EXPECT_EQ(result.binary[0], 0x7f);
  EXPECT_EQ(result.binary[1], 'E');
  EXPECT_EQ(result.binary[2], 'L');
  EXPECT_EQ(result.binary[3], 'F');
}

INSTANTIATE_TEST_SUITE_P(RealArchitectures, NvrtcArch, ::testing::Values("sm_80", "sm_90"));

TEST(Nvrtc, VirtualArchitectureGivesPtxWithTheEntryPoint) {
  KVEVICT_REQUIRE_NVRTC();
  NvrtcRequest request;
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = "compute_80";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  ASSERT_TRUE(result.ok) << result.log;
  EXPECT_EQ(result.kind, BinaryKind::Ptx);
  EXPECT_NE(result.ptx.find(".entry kvevict_cake_indicator"), std::string::npos);
  EXPECT_NE(result.ptx.find(".target sm_80"), std::string::npos);
  ASSERT_FALSE(result.binary.empty());
  EXPECT_EQ(result.binary.back(), 0) << "PTX handed to the driver must be NUL-terminated";
}

TEST(Nvrtc, CompileErrorsComeBackWithTheLogAndLineDirectivesMapThem) {
  KVEVICT_REQUIRE_NVRTC();
  NvrtcRequest request;
  request.name = "generated.cu";
  request.source = "#line 7 \"policies/broken.yaml\"\n__global__ void k() { undefined_thing(); }\n";
  request.arch = "sm_80";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.log.find("policies/broken.yaml(7)"), std::string::npos) << result.log;
  EXPECT_NE(result.log.find("undefined_thing"), std::string::npos) << result.log;
}

TEST(Nvrtc, RejectsMalformedAndUnsupportedArchitectures) {
  EXPECT_THROW(parse_arch_number("sm80"), UsageError);
  EXPECT_THROW(parse_arch_number("sm_x0"), UsageError);
  EXPECT_THROW(parse_arch_number(""), UsageError);
  EXPECT_EQ(parse_arch_number("sm_90a"), 90);
  EXPECT_EQ(parse_arch_number("compute_75"), 75);
  KVEVICT_REQUIRE_NVRTC();
  if (NvrtcLibrary::instance().supported_archs().empty()) GTEST_SKIP() << "this NVRTC cannot list its architectures";
  NvrtcRequest request;
  request.source = "__global__ void k() {}\n";
  request.arch = "sm_10";
  EXPECT_THROW(NvrtcLibrary::instance().compile(request), UsageError);
}

TEST(Nvrtc, MissingLibraryIsAClearRuntimeErrorInAChildProcess) {
  // The instance is process-wide and may already be open here, so check the failure path in a
  // freshly re-executed child ("threadsafe" death tests) whose KVEVICT_NVRTC points nowhere.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ASSERT_EXIT(
      {
        setenv("KVEVICT_NVRTC", "/nonexistent/libnvrtc.so", 1);
        try {
          NvrtcLibrary::instance();
        } catch (const RuntimeError& e) {
          const std::string what = e.what();
          std::exit(what.find("NVRTC") != std::string::npos && what.find("/nonexistent/libnvrtc.so") != std::string::npos ? 0 : 3);
        }
        std::exit(4);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kvevict::jit

namespace kvevict::jit {
namespace {

// Every built-in policy's generated CUDA must compile for sm_80 and sm_90.
TEST_P(NvrtcArch, EveryBuiltInPolicyCompiles) {
  KVEVICT_REQUIRE_NVRTC();
  if (!code_generator_available()) GTEST_SKIP() << "the CUDA code generator is not built yet (it needs the DSL's lowered form)";
  std::vector<std::string> policies;
  std::error_code ec;
  for (const std::string& dir : builtin_policy_dirs())  // policies/ and policies/field/
    for (const auto& item : std::filesystem::directory_iterator(dir, ec))
      if (item.path().extension() == ".yaml") policies.push_back(item.path().string());
  ASSERT_FALSE(policies.empty()) << "no policy files in " << KVEVICT_POLICY_DIR;
  for (const auto& policy : policies) {
    const GeneratedKernel kernel = generate_policy_cuda(policy, {}, {});  // every built-in file generates
    NvrtcRequest request;
    request.name = kernel.name;
    request.source = kernel.source;
    request.arch = GetParam();
    const NvrtcResult result = NvrtcLibrary::instance().compile(request);
    EXPECT_TRUE(result.ok) << policy << ":\n" << result.log;
  }
}

}  // namespace
}  // namespace kvevict::jit
