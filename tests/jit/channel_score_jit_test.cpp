// channel_score programs (key-channel pruning, core/engine/channel_selection.h) under the JIT
// backends: the CUDA generator emits them as the `kvevict_channel_score` entry (one thread per key
// channel, KernelOutput::Channel in kernel_abi.h) and JitPolicyProgram runs it instead of the
// interpreter. Checked here: the host build equals the interpreter bit for bit on
// policies/field/think.yaml and on hand-written channel programs (reductions over t, h, q and
// their combinations, windows, normalise, rank over d, inverse, reads of K, K_pre, V, Q, A and
// hidden), and to 1e-6 relative on random channel programs (tests/jit/policy_generator.h); NVRTC
// compiles the kernels (skipped without NVRTC); the GPU entry matches the interpreter (skipped
// without a device).
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "jit/codegen.h"
#include "jit/cuda_codegen.h"
#include "jit/jit_compiler.h"
#include "jit/jit_policy_program.h"
#include "jit/scoring_backend.h"
#include "jit_test_support.h"
#include "policy_generator.h"

namespace kvevict::jit {
namespace {

std::string think_file() { return std::string(KVEVICT_POLICY_DIR) + "/field/think.yaml"; }

// Hand-written channel programs: each line is a `channel_score:` body (the score is trivial).
struct ChannelProgram {
  const char* name;
  const char* body;
};
const ChannelProgram kChannelPrograms[] = {
    {"joint_h_q_max_t", "  channel_score[d] = sum(h, q: Q[h, q, d] * Q[h, q, d]) * max(t: K[d, t])\n"},
    {"var_t_min_h", "  channel_score[d] = var(t: K_pre[d, t]) - min(h: mean(q: abs(Q[h, q, d])))\n"},
    {"h_q_t_and_normalise",
     "  channel_score[d] = mean(h, q, t: A[h, q, t] * K[d, t]) + sum(t: normalise(K[d, t] * K[d, t]) * V[d, t])\n"},
    {"scalar_broadcast", "  channel_score[d] = mean(t: key_norm[t]) + T * 0.5\n"},
    {"window_then_rank",
     "  m[d] = max(t: mean(k in -1 .. 1: K[d, t + k]))\n  channel_score[d] = rank(d: m[d]) + m[d] * 0.01\n"},
    {"nan_kept", "  channel_score[d] = if(d < 4, sqrt(0 - 1 - d), entropy(t: normalise(K[d, t])))\n"},
    {"inverse", "  mi[d, e] = inverse(sum(t: K[d, t] * K[e, t]) * 0.01 + if(d == e, 1, 0))\n"
                "  channel_score[d] = sum(e: mi[d, e] * mean(t: K[e, t]))\n"},
    {"hidden_and_random", "  channel_score[d] = mean(t: K[d, t] * random[t]) * sum(c: mean(t: hidden[c, t]))\n"},
};

// Writes the policy file of `p` into `dir` and returns its path.
std::string write_channel_policy(const std::string& dir, const ChannelProgram& p) {
  const std::string file = dir + "/" + p.name + ".yaml";
  std::ofstream(file) << "name: " << p.name << "\nabout: a hand-written channel_score program\n"
                      << "observe: {window: 8}\nrun: {prefill: true}\nscore: |\n  score[t] = key_norm[t]\n"
                      << "channel_score: |\n" << p.body << "channels: {prune: 0.25}\n";
  return file;
}

std::unique_ptr<JitPolicyProgram> host_program(const std::string& file, const std::string& dir) {
  return JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)),
                                   generate_policy_cuda(file, {}, {}), dir);
}

// The shapes every comparison runs: one query head and window row, GQA groups, long heads.
struct Shape {
  int group, W, T;
};
constexpr Shape kShapes[] = {{1, 1, 1}, {1, 1, 2}, {4, 32, 300}, {2, 8, 97}, {8, 4, 1500}};

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// `jit`'s channel scores against the interpreter's on every shape. tolerance 0: the same bits
// (any NaN equals any NaN: the payloads of two NaNs are not part of the contract); else relative.
// Counts of what the interpreter gave, so callers can check that a sample is not degenerate.
struct ChannelCounts {
  int nan = 0, inf = 0, finite = 0;
};
ChannelCounts expect_channels_match(const std::string& what, const PolicyProgram& jit, const PolicyProgram& interpreted,
                          float tolerance, uint32_t seed = 41) {
  ChannelCounts counts;
  for (const Shape& s : kShapes) {
    testing::RandomScoreInputs random(s.group, s.W, s.T, seed++);
    random.inputs.layer = 3;
    random.inputs.kv_head = 1;
    const int d = random.inputs.head_dim;
    std::vector<float> want(size_t(d), -7.0f), got(size_t(d), 7.0f);
    interpreted.channel_score(random.inputs, want.data());
    jit.channel_score(random.inputs, got.data());
    for (int c = 0; c < d; ++c) {
      const float w = want[size_t(c)], g = got[size_t(c)];
      counts.inf += std::isinf(w);
      counts.finite += std::isfinite(w);
      const std::string where = what + " G=" + std::to_string(s.group) + " W=" + std::to_string(s.W) +
                                " T=" + std::to_string(s.T) + " c=" + std::to_string(c);
      if (std::isnan(w) || std::isnan(g)) {
        EXPECT_TRUE(std::isnan(w) && std::isnan(g)) << where << ": expected " << w << " got " << g;
        counts.nan += std::isnan(w);
      } else if (tolerance == 0 || std::isinf(w) || std::isinf(g)) {
        EXPECT_EQ(bits(g), bits(w)) << where << ": expected " << w << " got " << g;
      } else {
        EXPECT_LE(std::fabs(g - w), tolerance * std::max(1e-6f, std::fabs(w))) << where << ": expected " << w << " got " << g;
      }
    }
  }
  return counts;
}

// The reference program with its channel_score replaced by a constant: a JitPolicyProgram built on
// it can only give the interpreter's channel scores if its kernel computes them.
class ConstantChannels : public PolicyProgram {
 public:
  explicit ConstantChannels(std::unique_ptr<PolicyProgram> inner) : inner_(std::move(inner)) {}
  const PolicyDescription& description() const override { return inner_->description(); }
  void score(const ScoreInputs& in, bool decoding, float* out) const override { inner_->score(in, decoding, out); }
  double layer_weight(const LayerWeightInputs& in) const override { return inner_->layer_weight(in); }
  void channel_score(const ScoreInputs& in, float* out) const override {
    for (int c = 0; c < in.head_dim; ++c) out[c] = 12345.0f;
  }

 private:
  std::unique_ptr<PolicyProgram> inner_;
};

TEST(ChannelScoreJit, ThinkHostEntryEqualsTheInterpreterBitForBit) {
  testing::TempDir dir;
  const GeneratedKernel kernel = generate_policy_cuda(think_file(), {}, {});
  EXPECT_EQ(kernel.entry_points, (std::vector<std::string>{kScoreEntry, kChannelScoreEntry}));
  EXPECT_EQ(kernel.channel_stages, 1) << "mean(t: K[d, t] ^ 2) is the channel program's one stage";
  EXPECT_TRUE(kernel.channel_signals[signal_index(TensorSignal::WindowQueryRows)]);
  EXPECT_TRUE(kernel.channel_signals[signal_index(TensorSignal::Keys)]);
  EXPECT_NE(kernel.source.find("KVEVICT_STAGED_CHANNEL_ENTRY(kvevict_channel_score, channel_score_channel"),
            std::string::npos);
  // Built on a reference whose channel scores are wrong: the kernel's must still be the interpreter's.
  auto jit = JitPolicyProgram::on_host(
      std::make_unique<ConstantChannels>(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(think_file()))),
      kernel, dir.path());
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(think_file()));
  ASSERT_TRUE(jit->description().channels.enabled);
  expect_channels_match("think", *jit, interpreted, 0.0f);
  // The token scores are still the kernel's too (1e-6, as every built-in policy's).
  testing::RandomScoreInputs random(4, 32, 300, 9);
  std::vector<float> want(300), got(300);
  interpreted.score(random.inputs, false, want.data());
  jit->score(random.inputs, false, got.data());
  for (int t = 0; t < 300; ++t) EXPECT_NEAR(got[t], want[t], 1e-6f * std::max(1.0f, std::fabs(want[t]))) << t;
}

// --scoring host builds its program in jit/scoring_backend.cpp: the channel scores come from there too.
TEST(ChannelScoreJit, TheHostScoringBackendRunsTheGeneratedChannelEntry) {
  testing::TempDir dir;
  testing::ScopedEnv cache("KVEVICT_CACHE_DIR", dir.path());
  const auto jit = load_scored_policy(think_file(), {}, {}, ScoringBackend::HostKernel, DeviceChoice{});
  ASSERT_NE(dynamic_cast<const JitPolicyProgram*>(jit.get()), nullptr);
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(think_file()));
  expect_channels_match("think (--scoring host)", *jit, interpreted, 0.0f);
}

TEST(ChannelScoreJit, HandWrittenChannelProgramsEqualTheInterpreterBitForBit) {
  testing::TempDir dir;
  int nans = 0;
  for (const ChannelProgram& p : kChannelPrograms) {
    const std::string file = write_channel_policy(dir.path(), p);
    auto jit = host_program(file, dir.path());
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    nans += expect_channels_match(p.name, *jit, interpreted, 0.0f).nan;
  }
  EXPECT_GT(nans, 0) << "nan_kept's NaN channel scores reach the output (the channel selection ranks them lowest)";
}

// The interpreter's checks, before anything runs: no signal, no channel.
TEST(ChannelScoreJit, MissingSignalsAndEmptyHeadsAreRuntimeErrors) {
  testing::TempDir dir;
  auto jit = host_program(think_file(), dir.path());
  testing::RandomScoreInputs random(2, 4, 10, 1);
  std::vector<float> out(64);
  random.inputs.set_signal(TensorSignal::WindowQueryRows, nullptr);
  try {
    jit->channel_score(random.inputs, out.data());
    ADD_FAILURE() << "channel scores without the queries they read";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("did not supply it"), std::string::npos) << e.what();
  }
  testing::RandomScoreInputs other(2, 4, 10, 2);
  other.inputs.head_dim = 0;
  EXPECT_THROW(jit->channel_score(other.inputs, out.data()), RuntimeError);
}

// A channel program's output is over d or a scalar; anything else is a GenerateError naming the
// file and the shape (the DSL checker already refuses such files, so this is the generator's own
// guard for programs built directly). The channel program handed over as a score is refused too.
TEST(ChannelScoreJit, TheGeneratorRefusesOutputsOverOtherAxes) {
  const dsl::CompiledPolicy c = dsl::compile_policy_file(think_file());
  ASSERT_GE(c.channel_score.output, 0);
  auto expect_refusal = [](const std::function<void()>& generate, const std::string& message) {
    try {
      generate();
      ADD_FAILURE() << "generated: " << message;
    } catch (const GenerateError& e) {
      EXPECT_NE(std::string(e.what()).find("think.yaml:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refusal([&] { generate_score_kernels("x.cu", think_file(), c.channel_score, nullptr); },
                 "a score must be per token or a scalar, not [d]");
  expect_refusal([&] { generate_score_kernels("x.cu", think_file(), c.score, nullptr, {}, {}, &c.score); },
                 "the channel_score program: a channel score must be per key channel or a scalar, not [t]");
}

// Random channel programs (policy_generator.h's channel_policy): 1e-6 relative, 1e-5 with logs
// (the interpreter's vectorised log of arrays is within 2 ulp of libm's, docs/JIT.md).
constexpr int kRandomChannelPolicies = 16;

std::vector<std::string> random_channel_policies(const std::string& dir) {
  testing::PolicyGenerator generator(20261202u);
  for (const auto& [name, text] : generator.table_files()) std::ofstream(dir + "/" + name) << text;
  std::vector<std::string> files;
  for (int i = 0; i < kRandomChannelPolicies; ++i) {
    files.push_back(dir + "/random_channels_" + std::to_string(i) + ".yaml");
    std::ofstream(files.back()) << generator.channel_policy("random_channels_" + std::to_string(i));
  }
  return files;
}

std::string file_text(const std::string& file) {
  std::ifstream in(file);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ChannelScoreJit, RandomChannelProgramsMatchTheInterpreterOnTheHost) {
  testing::TempDir dir;
  int staged = 0;
  ChannelCounts all;
  for (const std::string& file : random_channel_policies(dir.path())) {
    const std::string text = file_text(file);
    SCOPED_TRACE(file + "\n" + text);
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    staged += kernel.channel_stages;
    auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                         dir.path());
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    const bool logs = text.find("log(") != std::string::npos || text.find("entropy(") != std::string::npos;
    const ChannelCounts counts = expect_channels_match(file, *jit, interpreted, logs ? 1e-5f : 1e-6f, 500);
    all.nan += counts.nan, all.inf += counts.inf, all.finite += counts.finite;
    if (HasFailure()) return;
  }
  std::printf("[ kvevict  ] random channel scores: %d finite, %d infinite, %d NaN\n", all.finite, all.inf, all.nan);
  EXPECT_GT(all.finite, 3 * (all.inf + all.nan)) << "most random channel scores are numbers (a meaningful comparison)";
  EXPECT_GE(staged, kRandomChannelPolicies) << "every random channel program has a reduction over t (a stage)";
}

class ChannelScoreArch : public ::testing::TestWithParam<const char*> {};

TEST_P(ChannelScoreArch, ChannelKernelsCompileWithNvrtc) {
  KVEVICT_REQUIRE_NVRTC();
  testing::TempDir dir;
  std::vector<std::string> files = random_channel_policies(dir.path());
  files.push_back(think_file());
  for (const ChannelProgram& p : kChannelPrograms) files.push_back(write_channel_policy(dir.path(), p));
  for (const std::string& file : files) {
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    ASSERT_EQ(kernel.entry_points.back(), kChannelScoreEntry) << file;
    NvrtcRequest request;
    request.name = kernel.name;
    request.source = kernel.source;
    request.arch = GetParam();
    const NvrtcResult result = NvrtcLibrary::instance().compile(request);
    EXPECT_TRUE(result.ok) << file << " for " << GetParam() << ":\n" << result.log;
  }
}

INSTANTIATE_TEST_SUITE_P(RealArchitectures, ChannelScoreArch, ::testing::Values("sm_80", "sm_90"));

// The GPU entry (GpuScoreKernel with KernelOutput::Channel, through JitPolicyProgram::on_gpu)
// against the interpreter: the stages add their lanes in another order (double sums) and the
// device's libm differs by a few ulp, hence 1e-5 relative instead of the host's equal bits.
TEST(ChannelScoreJitGpu, ChannelEntriesMatchTheInterpreterOnTheDevice) {
  KVEVICT_GPU_TEST_SETUP(gpu);
  use_cuda_device(0);
  const testing::TempDir& dir = gpu.dir;
  std::vector<std::string> files = {think_file()};
  for (const ChannelProgram& p : kChannelPrograms) files.push_back(write_channel_policy(dir.path(), p));
  for (const std::string& file : random_channel_policies(dir.path())) files.push_back(file);
  for (const std::string& file : files) {
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    const JitKernel compiled = gpu.compile(kernel, kernel.name);
    auto jit = JitPolicyProgram::on_gpu(
        std::make_unique<ConstantChannels>(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file))), kernel,
        *compiled.entry, 0);
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    expect_channels_match(file, *jit, interpreted, 1e-5f);
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
