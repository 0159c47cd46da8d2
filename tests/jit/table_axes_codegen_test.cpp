// The CUDA generator on the table axes beyond [layer, kv_head, d] (dsl/table_data.h): a table read
// at a scalar row (the index axis), per query head (head, along h) and over two channel axes
// (d, e, also transposed) is baked into the kernel text, built as host C++ and compared with the
// interpreter on random inputs; the same text compiles with NVRTC where it is available. A table
// larger than the generator bakes is a clear GenerateError.
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
  const GeneratedKernel kernel = generate_policy_cuda(write_policy(dir.path()), {}, {});
  NvrtcRequest request;
  request.name = "axes.cu";
  request.source = kernel.source;
  request.arch = "sm_90";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  EXPECT_TRUE(result.ok) << result.log;
}

TEST(TableAxesCodegen, ATableLargerThanTheGeneratorBakesIsRefused) {
  testing::TempDir dir;
  const int rows = static_cast<int>(dsl::kMaxBakedTableElements / kDim) + 1;
  write_table(dir.path() + "/big.tsv", rows, kDim, 1.0);
  const std::string file = dir.path() + "/big.yaml";
  std::ofstream(file) << "name: big\nabout: a big table\ntables:\n  big: {file: big.tsv, axes: [layer, d], shape: [" +
                             std::to_string(rows) + ", 8]}\nscore: |\n  score[t] = sum(d: big[layer, d] * K[d, t])\n";
  EXPECT_NO_THROW(dsl::compile_policy_file(file)) << "the interpreter reads it";
  try {
    generate_policy_cuda(file, {}, {});
    ADD_FAILURE() << "the generator baked a table of " << rows * kDim << " numbers";
  } catch (const GenerateError& e) {
    EXPECT_NE(std::string(e.what()).find("table 'big' holds 131080 numbers; the CUDA generator bakes at most 131072 into a "
                                         "kernel (the interpreter reads it)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
