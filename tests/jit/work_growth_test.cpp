// How a generated kernel's work grows with T (jit/work_growth.h): the exponent counted on the
// built-ins' lowered programs against their formulas, programs built to each rule, and the refusal
// of a call that would not finish (through the host backend, before any work).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "dsl/program_builder.h"
#include "jit/codegen.h"
#include "jit/jit_policy_program.h"
#include "jit/work_growth.h"
#include "jit_test_support.h"

#ifdef KVEVICT_HAVE_LOWERED_FORM
namespace kvevict::jit {
namespace {

using dsl::ProgramBuilder;
using dsl::Reducer;

// The policy file's name without its folder and extension ("rkv" for policies/field/rkv.yaml).
std::string stem(const std::string& file) {
  const size_t slash = file.find_last_of('/'), dot = file.rfind('.');
  return file.substr(slash + 1, dot - slash - 1);
}

// The exponents against the formulas: R-KV's dropped[t] sums over s a value that is itself a max
// over t (drop[s]), evaluated in the token's thread: T^3 per head; DefensiveKV's sorted_cumsum
// along t is a pass over the tokens in each token's thread: T^2; every other built-in scores a
// token from stages and its own row: T.
TEST(WorkGrowth, EveryBuiltInGrowsAsItsFormulaSays) {
  const std::map<std::string, int> beyond_linear = {{"rkv", 3}, {"defensive_kv", 2}};
  int linear = 0;
  for (const std::string& file : builtin_policy_files()) {
    const GeneratedKernel k = generate_policy_cuda(file, {}, {});
    const auto it = beyond_linear.find(stem(file));
    EXPECT_EQ(k.score_work_exponent, it == beyond_linear.end() ? 1 : it->second) << file;
    EXPECT_EQ(k.decode_work_exponent, 1) << file;
    EXPECT_EQ(k.channel_work_exponent, 1) << file;
    linear += it == beyond_linear.end();
  }
  EXPECT_GE(linear, 40);
}

// Programs built to each rule: a per-token read, a stage over t read by every token, a token
// window (bounded offsets), and a rank along t in the token's thread; the same stage as a channel
// kernel's (threads over d, not t).
TEST(WorkGrowth, StagesAreOncePerSlotAndThreadLoopsNest) {
  auto exponent = [](auto body, KernelOutput output = KernelOutput::Token) {
    ProgramBuilder b(false);
    return token_work_exponent(b.finish(body(b)), output);
  };
  EXPECT_EQ(exponent([](ProgramBuilder& b) { return b.load(TensorSignal::KeyNorm); }), 1);
  EXPECT_EQ(exponent([](ProgramBuilder& b) {
              const int norms = b.load(TensorSignal::KeyNorm);
              return b.binary(dsl::BinaryFn::Sub, norms, b.reduce(Reducer::Mean, dsl::kAxisT, norms));
            }),
            1);
  EXPECT_EQ(exponent([](ProgramBuilder& b) { return b.window(Reducer::Max, -3, 3, b.load(TensorSignal::KeyNorm)); }),
            1);
  EXPECT_EQ(exponent([](ProgramBuilder& b) { return b.sort(dsl::SortFn::Rank, dsl::kAxisT, b.load(TensorSignal::KeyNorm)); }),
            2);
  EXPECT_EQ(exponent([](ProgramBuilder& b) {
              return b.reduce(Reducer::Sum, dsl::kAxisT, b.load(TensorSignal::Keys));  // [d]: a stage per channel
            },
                     KernelOutput::Channel),
            1);
  EXPECT_EQ(token_work_exponent(dsl::LoweredProgram{}), 0);
}

TEST(WorkGrowth, OnlyWorkThatWouldNotFinishIsRefused) {
  EXPECT_NO_THROW(refuse_unfinishable_work("p", 3, 4096, 128));     // 2^43
  EXPECT_NO_THROW(refuse_unfinishable_work("p", 2, 131072, 128));   // 2^41: a T^2 program at 128K
  EXPECT_NO_THROW(refuse_unfinishable_work("p", 1, 1 << 24, 128));  // 2^31
  try {
    refuse_unfinishable_work("rkv", 3, 8192, 128);  // 2^46
    FAIL() << "R-KV's T^3 kernel at 8K was let through";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'rkv'"), std::string::npos) << what;
    EXPECT_NE(what.find("T^3"), std::string::npos) << what;
    EXPECT_NE(what.find("--scoring interpreter"), std::string::npos) << what;
  }
}

// The runner refuses before any work: R-KV through the host backend at T = 8192 (head_dim 64:
// 2^45), and the same program scores at T = 300.
TEST(WorkGrowth, TheRunnerRefusesACallThatWouldNotFinish) {
  testing::TempDir dir;
  const std::string file = std::string(KVEVICT_POLICY_DIR) + "/field/rkv.yaml";
  auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)),
                                       generate_policy_cuda(file, {}, {}), dir.path());
  testing::RandomScoreInputs small(2, 8, 300, 7);
  std::vector<float> out(300);
  EXPECT_NO_THROW(jit->score(small.inputs, false, out.data()));
  testing::RandomScoreInputs large(2, 8, 8192, 7);
  out.assign(8192, 0.0f);
  EXPECT_THROW(jit->score(large.inputs, false, out.data()), UsageError);
}

}  // namespace
}  // namespace kvevict::jit
#endif
