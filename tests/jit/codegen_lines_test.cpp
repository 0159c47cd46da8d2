// Source positions in generated CUDA: every expression's code carries `#line N "<policy file>"`
// for the policy line it came from (not just the program's key), so NVRTC's messages, even for a
// deliberately broken expression on a continuation line, cite the policy file and that line; the
// generator's own errors are `file:line:col: error:` UsageErrors (exit 2).
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>

#include <fstream>

#include "dsl/program_builder.h"
#include "jit/codegen.h"
#include "jit/cuda_codegen.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

// Line numbers matter: the test looks for them.
const char* const kPolicy =
    "name: lines\n"                                    // 1
    "about: one expression per line\n"                 // 2
    "observe: {window: 4}\n"                           // 3
    "score: |\n"                                       // 4
    "  m[h, t] = mean(q: A[h, q, t])\n"                // 5
    "  s = sum(t: key_norm[t])\n"                      // 6
    "  n[t] = normalise(value_norm[t])\n"              // 7
    "  score[t] = (log(mean(h: m[h, t]))\n"            // 8
    "    + n[t] / sqrt(s))\n";                         // 9

std::string write_policy(const testing::TempDir& dir) {
  const std::string file = dir.path() + "/lines.yaml";
  std::ofstream(file) << kPolicy;
  return file;
}

// The number of the policy line in effect at the first line of `source` containing `needle`.
int policy_line_of(const std::string& source, const std::string& needle, const std::string& file) {
  const std::string directive = "#line ";
  const size_t at = source.find(needle);
  if (at == std::string::npos) return -1;
  const size_t d = source.rfind(directive, at);
  if (d == std::string::npos) return -1;
  const size_t end = source.find('\n', d);
  const std::string text = source.substr(d, end - d);
  if (text.find(CudaWriter::quote(file)) == std::string::npos) return 0;  // scaffolding, not the policy
  // A #line directive names the line that follows it; `needle` must be on that line.
  if (source.find('\n', end + 1) < at) return 0;
  return std::stoi(text.substr(directive.size()));
}

TEST(CodegenLines, EachExpressionCitesItsOwnPolicyLine) {
  testing::TempDir dir;
  const std::string file = write_policy(dir);
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  EXPECT_EQ(policy_line_of(kernel.source, "kv_load(a.tensor[0] /* A */,", file), 5);  // A[h, q, t]
  EXPECT_EQ(policy_line_of(kernel.source, "kv_load(a.tensor[3] /* key_norm */, t, kv_extent_axes(a, 0, 0, 0, 1), 0.0f)", file), 6);
  EXPECT_EQ(policy_line_of(kernel.source, "kv_load(a.tensor[4] /* value_norm */, t,", file), 7);
  EXPECT_EQ(policy_line_of(kernel.source, "logf(", file), 8);
  EXPECT_EQ(policy_line_of(kernel.source, "sqrtf(", file), 9);  // a continuation line of the definition
  EXPECT_EQ(kernel.score_stages, 2);                            // sum over t and normalise
}

TEST(CodegenLines, ABrokenExpressionGetsAnNvrtcDiagnosticAtItsPolicyLine) {
  KVEVICT_REQUIRE_NVRTC();
  testing::TempDir dir;
  const std::string file = write_policy(dir);
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  const std::string key_norm = "kv_load(a.tensor[3] /* key_norm */, t, kv_extent_axes(a, 0, 0, 0, 1), 0.0f)";  // the whole call
  for (const auto& [needle, line] : {std::pair<std::string, int>{"sqrtf(", 9}, {"logf(", 8}, {key_norm, 6}}) {
    // Break the code of one expression, as a generator bug would: NVRTC must blame that line.
    std::string source = kernel.source;
    const size_t at = source.find(needle);
    ASSERT_NE(at, std::string::npos) << needle;
    source.replace(at, needle.size(), "kv_no_such_function(");
    if (needle.back() != '(') source.insert(at + std::string("kv_no_such_function(").size(), ")");
    NvrtcRequest request;
    request.name = kernel.name;
    request.source = source;
    request.arch = "sm_80";
    const NvrtcResult result = NvrtcLibrary::instance().compile(request);
    ASSERT_FALSE(result.ok) << needle;
    EXPECT_NE(result.log.find(file + "(" + std::to_string(line) + ")"), std::string::npos) << needle << ":\n" << result.log;
    EXPECT_NE(result.log.find("kv_no_such_function"), std::string::npos) << result.log;
  }
}

TEST(CodegenLines, UnsupportedConstructsAreUsageErrorsWithTheirPosition) {
  // `budget` exists only in layer_weight programs (the checker rejects it in scores); a lowered
  // program that has it anyway is refused with the position of the expression.
  dsl::ProgramBuilder b(false);
  const int out = b.binary(dsl::BinaryFn::Mul, b.scalar(dsl::ScalarSignal::Budget), b.load(dsl::TensorSignal::KeyNorm));
  b.locate(0, 12, 14);
  const dsl::LoweredProgram program = b.finish(out);
  try {
    generate_score_kernels("x.cu", "policies/x.yaml", program, nullptr);
    FAIL() << "budget in a score program was generated";
  } catch (const GenerateError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()).rfind("policies/x.yaml:12:14: error: ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
