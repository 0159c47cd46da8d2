// channel_score programs (key-channel pruning, core/engine/channel_selection.h) under the JIT
// backends. The CUDA generator does NOT generate them (a gap, docs/DSL.md §11): the generated
// kernel is the file's token score, which the host-compiled kernel computes as the interpreter does,
// and channel_score is delegated to the reference program (the interpreter), as head_mode and
// head_weight are. This test pins both halves for policies/field/think.yaml.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "jit/codegen.h"
#include "jit/cuda_codegen.h"
#include "jit/jit_policy_program.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

TEST(ChannelScoreJit, HostKernelScoresAsTheInterpreterAndChannelScoresAreTheInterpreters) {
  const std::string file = std::string(KVEVICT_POLICY_DIR) + "/field/think.yaml";
  testing::TempDir dir;
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  EXPECT_EQ(kernel.source.find("channel_score"), std::string::npos) << "channel_score is not generated";
  auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                       dir.path());
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  ASSERT_TRUE(jit->description().channels.enabled);
  uint32_t seed = 41;
  for (auto [group, W, T] : {std::tuple{1, 1, 2}, {4, 32, 300}, {2, 8, 97}}) {
    testing::RandomScoreInputs random(group, W, T, seed++);
    std::vector<float> want(T), got(T);
    interpreted.score(random.inputs, false, want.data());
    jit->score(random.inputs, false, got.data());
    for (int t = 0; t < T; ++t) EXPECT_NEAR(got[t], want[t], 1e-6f * std::max(1.0f, std::fabs(want[t]))) << t;
    const int d = random.inputs.head_dim;
    std::vector<float> cw(d), cg(d);
    interpreted.channel_score(random.inputs, cw.data());
    jit->channel_score(random.inputs, cg.data());
    EXPECT_EQ(cg, cw) << "G=" << group << " W=" << W << " T=" << T;
    float spread = 0;
    for (int c = 1; c < d; ++c) spread = std::max(spread, std::fabs(cw[c] - cw[0]));
    EXPECT_GT(spread, 0.0f) << "random inputs give different channel scores";
  }
}

// The generator's own refusal: a channel_score program handed to it (output over d) is refused
// with a message naming the file, the line and the shape, never turned into a wrong kernel.
TEST(ChannelScoreJit, TheGeneratorRefusesAChannelProgramClearly) {
  const std::string file = std::string(KVEVICT_POLICY_DIR) + "/field/think.yaml";
  const dsl::CompiledPolicy c = dsl::compile_policy_file(file);
  ASSERT_GE(c.channel_score.output, 0);
  try {
    generate_score_kernels("think_channels", file, c.channel_score, nullptr);
    ADD_FAILURE() << "a channel program was generated";
  } catch (const GenerateError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("think.yaml:"), std::string::npos) << what;
    EXPECT_NE(what.find("a score must be per token or a scalar, not [d]"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
