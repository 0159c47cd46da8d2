// The CUDA generator on the table axes beyond [layer, kv_head, d] (dsl/table_data.h): a table read
// at a scalar row (the index axis), per query head (head, along h) and over two channel axes
// (d, e, also transposed) is baked into the kernel text, built as host C++ and compared with the
// interpreter on random inputs; the same text compiles with NVRTC where it is available. A table
// larger than the generator bakes is loaded into the module by its runner instead.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/table_data.h"
#include "jit/codegen.h"
#include "jit/cuda_codegen.h"
#include "jit/jit_policy_program.h"
#include "jit/nvrtc_library.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

constexpr int kLayers = 4, kKvHeads = 2, kGroup = 4, kDim = 8;

// A table file of `rows` rows of `cols` numbers, a fixed function of the flat index.
void write_table(const std::string& path, int rows, int cols, double scale) {
  std::ofstream f(path);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) f << (c ? "\t" : "") << scale * std::sin(0.7 * (r * cols + c) + 0.3);
    f << "\n";
  }
}

std::string write_policy(const std::string& dir) {
  write_table(dir + "/cur.tsv", 3 * kLayers, kKvHeads, 1.0);
  write_table(dir + "/m.tsv", kLayers * kKvHeads * kGroup * kDim, kDim, 0.5);
  write_table(dir + "/mu.tsv", kLayers * kKvHeads * kGroup, kDim, 2.0);
  const std::string shape_h = std::to_string(kKvHeads * kGroup);
  const std::string file = dir + "/axes.yaml";
  std::ofstream(file) << "name: axes\nabout: table axes\n"
                         "params:\n  r: {float: 1.3, min: -10, max: 10}\n"
                         "tables:\n"
                         "  cur: {file: cur.tsv, axes: [index, layer, kv_head], shape: [3, 4, 2]}\n"
                         "  m: {file: m.tsv, axes: [layer, head, d, e], shape: [4, " + shape_h + ", 8, 8]}\n"
                         "  mu: {file: mu.tsv, axes: [layer, head, d], shape: [4, " + shape_h + ", 8]}\n"
                         "observe: {rope_future: 16}\n"
                         "score: |\n"
                         "  row = r + 0.2\n"
                         "  u[d, t] = sum(e: R_future[e, d] * K[e, t])\n"
                         "  uc[h, d, t] = sum(e: m[layer, h, d, e] * u[e, t]) + sum(e: m[layer, h, e, d] * K[e, t])\n"
                         "  score[t] = sum(h: sum(d: uc[h, d, t] * u[d, t] + mu[layer, h, d] * K[d, t])) + "
                         "cur[row, layer, kv_head] * key_norm[t]\n";
  return file;
}

void expect_matches(const PolicyProgram& jit, const PolicyProgram& interpreted, const std::string& what) {
  uint32_t seed = 900;
  for (int T : {2, 300}) {
    testing::RandomScoreInputs random(kGroup, 4, T, seed++);
    random.inputs.head_dim = kDim;
    random.inputs.n_layers = kLayers;
    random.inputs.n_kv_heads = kKvHeads;
    for (int layer : {0, 3})
      for (int kv : {0, 1}) {
        random.inputs.layer = layer;
        random.inputs.kv_head = kv;
        std::vector<float> expected(T), actual(T);
        interpreted.score(random.inputs, false, expected.data());
        jit.score(random.inputs, false, actual.data());
        for (int t = 0; t < T; ++t)
          ASSERT_NEAR(actual[t], expected[t], 1e-5f * std::max(1.0f, std::fabs(expected[t])))
              << what << " layer " << layer << " kv " << kv << " T " << T << " t " << t;
      }
  }
}

// The kernel's text compiles with NVRTC for sm_90.
void expect_nvrtc_compiles(const GeneratedKernel& kernel) {
  NvrtcRequest request;
  request.name = kernel.name;
  request.source = kernel.source;
  request.arch = "sm_90";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  EXPECT_TRUE(result.ok) << kernel.name << ": " << result.log;
}

TEST(TableAxesCodegen, IndexHeadAndChannelReadsMatchTheInterpreterOnTheHost) {
  testing::TempDir dir;
  const std::string file = write_policy(dir.path());
  // r = 1.3 reads row 2 (1.5 rounds up); r = 5 reads outside the table (0); r = -0.4 reads row 0.
  for (const std::string r : {"1.3", "5", "-0.4"}) {
    const std::map<std::string, std::string> params = {{"r", r}};
    const GeneratedKernel kernel = generate_policy_cuda(file, params, {});
    EXPECT_NE(kernel.source.find("kv_table_0"), std::string::npos);
    EXPECT_NE(kernel.source.find("llround"), std::string::npos) << "the row is rounded in the kernel";
    auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file, params)),
                                         kernel, dir.path());
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file, params));
    expect_matches(*jit, interpreted, "r = " + r);
  }
}

TEST(TableAxesCodegen, IndexHeadAndChannelReadsCompileWithNvrtc) {
  KVEVICT_REQUIRE_NVRTC();
  testing::TempDir dir;
  expect_nvrtc_compiles(generate_policy_cuda(write_policy(dir.path()), {}, {}));
}

// A policy whose table `big` has more numbers than the generator bakes (rows x 8), its values scaled
// by `scale`.
std::string write_big_policy(const std::string& dir, int rows, double scale, const std::string& name) {
  write_table(dir + "/" + name + ".tsv", rows, kDim, scale);
  const std::string file = dir + "/" + name + ".yaml";
  std::ofstream(file) << "name: " + name + "\nabout: a big table\ntables:\n  big: {file: " + name +
                             ".tsv, axes: [layer, d], shape: [" + std::to_string(rows) +
                             ", 8]}\nscore: |\n  score[t] = sum(d: big[layer, d] * K[d, t])\n";
  return file;
}

// A table larger than the generator bakes is declared in the text and loaded into the module by its
// runner (jit/loaded_tables.h): the host build then scores as the interpreter does, the text holds
// no value of it (two such tables of one shape share one kernel text), and a module whose table
// was not loaded (all zeros) scores otherwise: the load is what the scores read.
TEST(TableAxesCodegen, ATableLargerThanTheGeneratorBakesIsLoadedIntoTheModule) {
  testing::TempDir dir;
  const int rows = static_cast<int>(dsl::kMaxBakedTableElements / kDim) + 1;
  const std::string file = write_big_policy(dir.path(), rows, 1.0, "big");
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  ASSERT_EQ(kernel.loaded_tables.size(), 1u);
  EXPECT_EQ(kernel.loaded_tables[0].symbol, "kv_table_0");
  EXPECT_EQ(kernel.loaded_tables[0].table->values.size(), size_t(rows) * kDim);
  EXPECT_NE(kernel.source.find("KVEVICT_LOADED_TABLE(kv_table_0, 131080)"), std::string::npos);
  EXPECT_EQ(kernel.source.find("KVEVICT_TABLE kv_table_0"), std::string::npos) << "baked after all";
  EXPECT_LT(kernel.source.size(), size_t{1} << 20) << "the values went into the text";
  auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                       dir.path());
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  expect_matches(*jit, interpreted, "a loaded table");
  // Another table of the same shape: the same text, other scores.
  const std::string other = write_big_policy(dir.path(), rows, -3.0, "big");
  const GeneratedKernel second = generate_policy_cuda(other, {}, {});
  EXPECT_EQ(second.source, kernel.source);
  auto jit_other = JitPolicyProgram::on_host(
      std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(other)), second, dir.path() + "/other");
  dsl::InterpretedPolicy interpreted_other(dsl::compile_policy_file(other));
  expect_matches(*jit_other, interpreted_other, "another loaded table");
  // The control: the kernel without its table loaded (a runner that forgot) scores 0 everywhere.
  GeneratedKernel unloaded = kernel;
  unloaded.loaded_tables.clear();
  auto forgot = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)),
                                          unloaded, dir.path() + "/forgot");
  testing::RandomScoreInputs random(kGroup, 4, 16, 77);
  random.inputs.head_dim = kDim;
  random.inputs.n_layers = kLayers;
  random.inputs.n_kv_heads = kKvHeads;
  std::vector<float> got(16), want(16);
  forgot->score(random.inputs, false, got.data());
  interpreted.score(random.inputs, false, want.data());
  EXPECT_NE(got, want);
}

TEST(TableAxesCodegen, ALoadedTableCompilesWithNvrtc) {
  KVEVICT_REQUIRE_NVRTC();
  testing::TempDir dir;
  const int rows = static_cast<int>(dsl::kMaxBakedTableElements / kDim) + 1;
  expect_nvrtc_compiles(generate_policy_cuda(write_big_policy(dir.path(), rows, 1.0, "big"), {}, {}));
}

// The GPU runners fill the loaded table into their modules (cuModuleGetGlobal): the CUDA backend
// scores as the interpreter does. Not yet run on a GPU.
TEST(TableAxesCodegen, ALoadedTableMatchesTheInterpreterOnTheDevice) {
  KVEVICT_GPU_TEST_SETUP(gpu);
  use_cuda_device(0);
  const int rows = static_cast<int>(dsl::kMaxBakedTableElements / kDim) + 1;
  const std::string file = write_big_policy(gpu.dir.path(), rows, 1.0, "big");
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  ASSERT_EQ(kernel.loaded_tables.size(), 1u);
  const JitKernel compiled = gpu.compile(kernel, kernel.name);
  auto jit = JitPolicyProgram::on_gpu(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                      *compiled.entry, 0);
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  expect_matches(*jit, interpreted, "a loaded table on the device");
}

}  // namespace
}  // namespace kvevict::jit
#endif
