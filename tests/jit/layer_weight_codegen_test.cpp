// layer_weight programs generated as kernels (KernelOutput::Layer, kernel_abi.h "Layer entries"):
// the host build of the generated text against the interpreter on random layers, for every
// built-in policy with a layer weight and for a program that exercises each construct over axis g;
// a control that the comparison sees a wrong head order; the GPU build (skips without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/program_builder.h"
#include "jit/cuda_codegen.h"
#include "jit/codegen.h"
#include "jit/host_module.h"
#include "jit/jit_policy_program.h"
#include "jit_test_support.h"

#ifdef KVEVICT_HAVE_LOWERED_FORM
namespace kvevict::jit {
namespace {

// One layer of random signals: n_kv heads, each its own RandomScoreInputs (kv_head = g).
struct RandomLayer {
  std::vector<std::unique_ptr<testing::RandomScoreInputs>> heads;
  LayerWeightInputs inputs;

  RandomLayer(int n_kv, int group, int W, int T, uint32_t seed, double budget) {
    for (int g = 0; g < n_kv; ++g) {
      heads.push_back(std::make_unique<testing::RandomScoreInputs>(group, W, T, seed + uint32_t(g)));
      heads.back()->inputs.kv_head = g;
      heads.back()->inputs.n_kv_heads = n_kv;
      heads.back()->inputs.layer = 2;
      inputs.heads.push_back(heads.back()->inputs);
    }
    inputs.layer = 2;
    inputs.n_layers = 6;
    inputs.prompt_len = T;
    inputs.budget = budget;
  }
};

struct Shape {
  int n_kv, group, W, T;
};
constexpr Shape kShapes[] = {{1, 1, 1, 2}, {2, 4, 8, 300}, {4, 2, 32, 1031}};

// The relative difference, 0 when both are the same value (zeros included).
double relative(double a, double b) { return a == b ? 0.0 : std::fabs(a - b) / std::max(1e-12, std::fabs(b)); }

// The worst relative difference between `jit` and the interpreter over kShapes and two budgets
// (128, one of the CAKE tau table's keys, and 300).
double worst_difference(const PolicyProgram& jit, const PolicyProgram& interpreted, uint32_t seed) {
  double worst = 0;
  for (const Shape& s : kShapes)
    for (double budget : {128.0, 300.0}) {
      RandomLayer layer(s.n_kv, s.group, s.W, s.T, seed, budget);
      seed += 17;
      const double expected = interpreted.layer_weight(layer.inputs), actual = jit.layer_weight(layer.inputs);
      worst = std::max(worst, relative(actual, expected));
    }
  return worst;
}

std::unique_ptr<JitPolicyProgram> host_program(const std::string& file, const std::map<std::string, std::string>& set,
                                               const testing::TempDir& dir) {
  return JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file, set)),
                                   generate_policy_cuda(file, set, {}), dir.path());
}

struct PolicyCase {
  std::string file;
  std::map<std::string, std::string> set;
};

std::vector<PolicyCase> layer_weight_policies() {
  const std::string dir = KVEVICT_POLICY_DIR;
  return {{dir + "/cake.yaml", {}},
          {dir + "/cake.yaml", {{"renormalise_rows", "true"}, {"tau_table", "llama2-7b-chat"}, {"tau1", "0.7"}}},
          {dir + "/pyramidkv.yaml", {}},
          {dir + "/spindlekv.yaml", {}},
          {dir + "/field/entropy_adaptive.yaml", {}},
          {dir + "/field/headkv.yaml", {}},
          {dir + "/field/per_layer_compression.yaml", {}},
          {dir + "/field/simlayerkv.yaml", {}}};
}

TEST(LayerWeightCodegen, EveryBuiltInLayerWeightMatchesTheInterpreterOnTheHost) {
  testing::TempDir dir;
  int with_stages = 0;
  for (const PolicyCase& c : layer_weight_policies()) {
    const GeneratedKernel kernel = generate_policy_cuda(c.file, c.set, {});
    ASSERT_NE(std::find(kernel.entry_points.begin(), kernel.entry_points.end(), kLayerWeightEntry), kernel.entry_points.end())
        << c.file;
    with_stages += kernel.layer_stages > 0;
    auto jit = host_program(c.file, c.set, dir);
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(c.file, c.set));
    // The host kernel adds in the interpreter's order with the same libm: equal up to the last bits.
    EXPECT_LE(worst_difference(*jit, interpreted, 40), 1e-6) << c.file;
  }
  EXPECT_GE(with_stages, 3) << "cake, entropy_adaptive and simlayerkv reduce over t (stages)";
}

// A layer program with each construct over g: a float reduction over g (max, var), a staged value
// that keeps g (a sum over t per (g, h, q)) read inside another reduction over g, the index of g,
// `budget`, a token window and normalise() under g, an entropy over (g, t), and the split stages
// (kernel_abi.h): a variance, max, min, mean and normalise over t with one value per layer or per
// KV head.
constexpr const char* kConstructsPolicy = R"(name: layer_constructs
about: every construct of a layer_weight program over axis g
observe: {window: 8}
score: |
  score[t] = mean(h: mean(q: A[h, q, t]))
layer_weight: |
  peak[g, t] = max(h, q: A[g, h, q, t])
  spread[h, q, t] = var(g: A[g, h, q, t])
  mass[g, h, q] = sum(t: if(t < T - W, A[g, h, q, t], 0))
  heavy = max(g: mean(h, q: mass[g, h, q]) / (1 + g)) + sum(g: mean(h, q: mass[g, h, q]) * (1 + g))
  pooled[g, t] = mean(k in -2 .. 2: peak[g, t + k])
  shares[g, h, q, t] = normalise(A[g, h, q, t] + 0.5)
  spread_mass = sum(h, q, t: spread[h, q, t])
  entropy_g = entropy(g, t: mean(h, q: shares[g, h, q, t]) / n_kv_heads)
  ramp = sum(g, t: pooled[g, t] * (g + 1)) / (budget + layer + 1)
  tvar = var(g, t: peak[g, t]) * 1000
  tops = sum(g: max(t: pooled[g, t]) * (g + 1) + min(t: peak[g, t]) + mean(t: peak[g, t]))
  norm_g[g, t] = normalise(peak[g, t])
  shaped = sum(g, t: norm_g[g, t] * (g + 1) * (t + 1)) / T
  layer_weight = TERM
)";
constexpr const char* kConstructTerms[] = {"heavy", "spread_mass", "entropy_g", "ramp", "tvar", "tops", "shaped",
                                           "heavy + spread_mass * 100 + entropy_g + ramp + tvar + tops + shaped"};
constexpr const char* kAllTerms = kConstructTerms[7];

// The policy file with `layer_weight = term`, written in `dir`.
std::string constructs_policy(const testing::TempDir& dir, const std::string& term) {
  std::string text = kConstructsPolicy;
  text.replace(text.find("TERM"), 4, term);
  const std::string file = dir.path() + "/layer_constructs.yaml";
  std::ofstream(file) << text;
  return file;
}

// Each term alone (so that no term hides in another's rounding), then their sum.
TEST(LayerWeightCodegen, ConstructsOverGMatchTheInterpreterOnTheHost) {
  testing::TempDir dir;
  for (const char* term : kConstructTerms) {
    const std::string file = constructs_policy(dir, term);
    auto jit = host_program(file, {}, dir);
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    EXPECT_LE(worst_difference(*jit, interpreted, 90), 1e-6) << term;
  }
  EXPECT_GE(generate_policy_cuda(constructs_policy(dir, kAllTerms), {}, {}).layer_stages, 3);
}

// Control: the same program given its heads in another order differs by far more than the
// tolerance above (terms over g weighted by 1 + g), so the equality rests on head g
// reading head g's signals.
TEST(LayerWeightCodegen, ControlAnotherHeadOrderIsSeen) {
  testing::TempDir dir;
  const std::string file = constructs_policy(dir, "heavy");
  auto jit = host_program(file, {}, dir);
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  RandomLayer layer(4, 2, 8, 300, 5, 128);
  LayerWeightInputs reversed = layer.inputs;
  std::reverse(reversed.heads.begin(), reversed.heads.end());
  EXPECT_GT(relative(jit->layer_weight(reversed), interpreted.layer_weight(layer.inputs)), 1e-5);
  EXPECT_LE(relative(jit->layer_weight(layer.inputs), interpreted.layer_weight(layer.inputs)), 1e-6);
}

// The interpreter's refusals hold for the kernel too: heads of different lengths, a missing signal
// (a RuntimeError, never a fault), device memory handed to the host backend.
TEST(LayerWeightCodegen, BadLayersAreRefusedLikeTheInterpreters) {
  testing::TempDir dir;
  auto jit = host_program(std::string(KVEVICT_POLICY_DIR) + "/cake.yaml", {}, dir);
  EXPECT_FALSE(jit->layer_weight_takes_device_signals()) << "the host backend reads host memory";
  RandomLayer layer(2, 2, 4, 40, 1, 64);
  LayerWeightInputs ragged = layer.inputs;
  ragged.heads[1].T = 39;
  EXPECT_THROW(jit->layer_weight(ragged), RuntimeError);
  LayerWeightInputs missing = layer.inputs;
  missing.heads[1].set_signal(TensorSignal::WindowAttention, nullptr);
  EXPECT_THROW(jit->layer_weight(missing), RuntimeError);
  LayerWeightInputs on_device = layer.inputs;
  on_device.heads[0].set_device_signal(TensorSignal::WindowAttention, layer.heads[0]->window_attention.data());
  EXPECT_THROW(jit->layer_weight(on_device), std::logic_error);
  EXPECT_THROW(jit->layer_weight(LayerWeightInputs{}), RuntimeError);
}

// Split stages spread over several parts on the host too (KVEVICT_HOST_STAGE_PARTS, added to the
// host compiler's flags) keep the interpreter's values: only the order of the double partial sums
// changes. The generated text has split stages (CAKE's preference is two of them).
TEST(LayerWeightCodegen, SplitStagesInSevenPartsMatchTheInterpreterOnTheHost) {
  testing::TempDir dir;
  testing::ScopedEnv parts("KVEVICT_HOST_CXXFLAGS", host_compiler_flags() + " -DKVEVICT_HOST_STAGE_PARTS=7");
  std::vector<PolicyCase> cases = layer_weight_policies();
  cases.push_back({constructs_policy(dir, kAllTerms), {}});
  for (const PolicyCase& c : cases) {
    auto jit = host_program(c.file, c.set, dir);
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(c.file, c.set));
    EXPECT_LE(worst_difference(*jit, interpreted, 40), 1e-6) << c.file;
  }
  const GeneratedKernel cake = generate_policy_cuda("cake", {}, {});
  EXPECT_NE(cake.source.find("kv_parts_combine(cell_"), std::string::npos);
}

TEST(LayerWeightCodegen, ScoreProgramsNeverGetALayerEntry) {
  const GeneratedKernel snapkv = generate_policy_cuda("snapkv", {}, {});
  EXPECT_EQ(std::find(snapkv.entry_points.begin(), snapkv.entry_points.end(), kLayerWeightEntry), snapkv.entry_points.end());
  EXPECT_EQ(snapkv.layer_stages, 0);
}

// inverse() lays its matrices in a score kernel's per-head scratch; a layer entry's has none, so a
// layer_weight program that reaches one (built without the checker, which refuses it in a file) is
// a GenerateError, not a kernel that writes past its scratch.
TEST(LayerWeightCodegen, InverseInALayerProgramIsRefused) {
  dsl::ProgramBuilder score_builder(false);
  dsl::LoweredProgram score = score_builder.finish(score_builder.load(TensorSignal::KeyNorm));
  dsl::ProgramBuilder b(true);
  const int inverse = b.inverse(b.load(TensorSignal::QueryCovariance));
  dsl::LoweredProgram layer = b.finish(b.reduce(dsl::Reducer::Sum, b.node(inverse).shape, inverse));
  try {
    generate_score_kernels("x.cu", "x.yaml", score, nullptr, {}, {}, nullptr, {}, &layer);
    FAIL() << "a layer_weight program with inverse() was generated";
  } catch (const GenerateError& e) {
    EXPECT_NE(std::string(e.what()).find("inverse() in a layer_weight program"), std::string::npos) << e.what();
  }
}

TEST(LayerWeightCodegenGpu, EveryBuiltInLayerWeightMatchesTheInterpreterOnTheDevice) {
  KVEVICT_GPU_TEST_SETUP(gpu);
  use_cuda_device(0);
  testing::TempDir dir;
  std::vector<PolicyCase> cases = layer_weight_policies();
  cases.push_back({constructs_policy(dir, kAllTerms), {}});
  for (const PolicyCase& c : cases) {
    const GeneratedKernel kernel = generate_policy_cuda(c.file, c.set, {});
    const JitKernel compiled = gpu.compile(kernel, kernel.name);
    auto jit = JitPolicyProgram::on_gpu(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(c.file, c.set)),
                                        kernel, *compiled.entry, 0);
    EXPECT_TRUE(jit->layer_weight_takes_device_signals());
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(c.file, c.set));
    // The lanes' double partial sums are added in a tree (not the interpreter's order) and the
    // GPU's logf/powf differ from glibc's by a few ulp.
    EXPECT_LE(worst_difference(*jit, interpreted, 40), 1e-5) << c.file;
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
