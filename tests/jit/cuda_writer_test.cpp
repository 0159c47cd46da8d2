// CudaWriter's #line bookkeeping: NVRTC errors cite the policy line for mapped lines and the
// generated file's true line for scaffolding.
#include "jit/cuda_writer.h"

#include <gtest/gtest.h>

#include <sstream>

#include "jit/nvrtc_library.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

std::string compile_log(const CudaWriter& writer) {
  NvrtcRequest request;
  request.name = writer.program_name();
  request.source = writer.text();
  request.arch = "sm_80";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  EXPECT_FALSE(result.ok);
  return result.log;
}

TEST(CudaWriter, QuotesFileNamesSafely) {
  EXPECT_EQ(CudaWriter::quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(CudaWriter::quote("x\ny"), "\"x\\012y\"");
}

TEST(CudaWriter, MappedLinesCiteThePolicyAndScaffoldingCitesTheGeneratedLine) {
  KVEVICT_REQUIRE_NVRTC();
  CudaWriter writer("cake.cu");
  writer.block("// prelude\n// more prelude\n");
  writer.line("extern \"C\" __global__ void k(float* out) {");
  writer.indent();
  writer.line("float a = 1.0f;", {"policies/cake.yaml", 14});
  writer.line("float b = a + undefined_in_policy;", {"policies/cake.yaml", 15});
  writer.line("out[0] = a + b;");
  writer.line("out[1] = undefined_in_scaffolding;");
  writer.dedent();
  writer.line("}");
  const std::string log = compile_log(writer);
  EXPECT_NE(log.find("policies/cake.yaml(15): error"), std::string::npos) << log;

  // Find the scaffolding line's real number in the generated text.
  std::istringstream text(writer.text());
  std::string line;
  int number = 0, scaffolding_line = 0;
  while (std::getline(text, line)) {
    ++number;
    if (line.find("undefined_in_scaffolding") != std::string::npos) scaffolding_line = number;
  }
  ASSERT_GT(scaffolding_line, 0);
  EXPECT_NE(log.find("cake.cu(" + std::to_string(scaffolding_line) + "): error"), std::string::npos)
      << "expected line " << scaffolding_line << "\n" << log << "\n" << writer.text();
}

TEST(CudaWriter, RepeatedLocationsStayOnTheSamePolicyLine) {
  KVEVICT_REQUIRE_NVRTC();
  CudaWriter writer("p.cu");
  writer.line("__global__ void k() {");
  writer.line("int x = 0;", {"p.yaml", 3});
  writer.line("int y = nope;", {"p.yaml", 3});
  writer.line("}");
  const std::string log = compile_log(writer);
  EXPECT_NE(log.find("p.yaml(3): error"), std::string::npos) << log;
}

}  // namespace
}  // namespace kvevict::jit
