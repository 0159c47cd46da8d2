// inverse(M) in generated kernels (a matrix stage: jit/kernel_abi.h, jit/cuda_codegen.h) against
// the interpreter (dsl/matrix_ops.h). Each policy's score exposes every entry of the inverse, one
// token per entry (score[t] = Ci at the entry numbered t), so the comparison covers the whole
// matrix, not a reduction of it: on the host the kernel runs the interpreter's own macro text, so
// the scores must be the same bits (NaN -> -inf included). Matrices: well conditioned,
// ill-conditioned (Gram matrices of positive keys), singular (rank 2: the ridge fallback),
// zero, indefinite and NaN (no inverse: -inf), asymmetric (symmetrised), batched over h and
// (h, q). The GPU variant (skipped without a device) compares with a tolerance (fused
// multiply-adds in the factorisation).
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dsl/compiled_program.h"
#include "dsl/matrix_ops.h"
#include "dsl/policy_file.h"
#include "jit/cuda_codegen.h"
#include "jit/cuda_driver.h"
#include "jit/jit_compiler.h"
#include "jit/jit_policy_program.h"
#include "jit/kernel_cache.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

struct MatrixCase {
  const char* name;
  const char* matrix;  // the definition of C (its axes: [d, e], [h, d, e] or [h, q, d, e])
  unsigned axes;       // 0: [d, e]; 1: with h; 3: with h and q
  bool invertible;     // false: the inverse is NaN, every score -inf
};

const MatrixCase kCases[] = {
    {"spd", "C[d, e] = sum(t: K[d, t] * K[e, t]) / T + if(d == e, 1, 0)", 0, true},
    {"gram_ill_conditioned", "C[d, e] = sum(t: K[d, t] * K[e, t])", 0, true},
    {"near_singular", "C[d, e] = sum(t: if(t < 3, K[d, t] * K[e, t], 0)) + if(d == e, 1e-6, 0)", 0, true},
    {"singular_rank_2", "C[d, e] = sum(t: if(t < 2, K[d, t] * K[e, t], 0))", 0, true},
    {"zero", "C[d, e] = 0 * d * e", 0, true},
    {"asymmetric", "C[d, e] = if(d == e, 2, 0) + if(d < e, 0.5, 0) + if(d > e, -0.25, 0)", 0, true},
    {"indefinite", "C[d, e] = sum(t: K[d, t] * K[e, t]) - if(d == e, 1e6, 0)", 0, false},
    {"nan_entry", "C[d, e] = if(d == 1 and e == 0, log(0 - 1), if(d == e, 1, 0))", 0, false},
    {"per_query_head", "C[h, d, e] = sum(t: K[d, t] * K[e, t]) / T + if(d == e, h, 0)", 1, true},
    {"per_query_head_and_query", "C[h, q, d, e] = if(d == e, 1 + h + 2 * q, 0.1 * (d + e) / head_dim)", 3, true},
};

// The policy file: C, its inverse, and a score that is the inverse's entry number t (0 past the
// last entry).
std::string policy_text(const MatrixCase& c) {
  const std::string axes = c.axes == 0 ? "d, e" : c.axes == 1 ? "h, d, e" : "h, q, d, e";
  const std::string entry = c.axes == 0   ? "d * head_dim + e"
                            : c.axes == 1 ? "(h * head_dim + d) * head_dim + e"
                                          : "((h * W + q) * head_dim + d) * head_dim + e";
  return std::string("name: ") + c.name + "\nabout: every entry of an inverse\nscore: |\n  " + c.matrix +
         "\n  Ci[" + axes + "] = inverse(C[" + axes + "])\n  score[t] = sum(" + axes + ": if(" + entry +
         " == t, Ci[" + axes + "], 0))\n";
}

// Random inputs with head_dim n and one token per entry of the inverse (the buffers are those of
// head_dim 64; a smaller head_dim reads a prefix of each channel row).
testing::RandomScoreInputs inputs_for(const MatrixCase& c, int n, int group, int W, uint32_t seed) {
  const int count = (c.axes & 1 ? group : 1) * (c.axes & 2 ? W : 1);
  testing::RandomScoreInputs random(group, W, count * n * n, seed);
  random.inputs.head_dim = n;
  random.inputs.layer = 1;
  random.inputs.kv_head = 1;
  return random;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(InverseCodegen, TheMatrixIsFactorisedOnceByAMatrixStage) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/lev.yaml";
  std::ofstream(file) << policy_text(kCases[8]);
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  EXPECT_EQ(kernel.score_matrices.count, 1);
  EXPECT_EQ(kernel.score_matrices.axes, 1) << "the matrix has axis h";
  EXPECT_EQ(kernel.score_stages, 1);
  EXPECT_NE(kernel.source.find("KVEVICT_STAGED_SCORE_ENTRY(kvevict_score, score_token, score_stage, 1, 1, 1)"),
            std::string::npos);
  EXPECT_NE(kernel.source.find("kv_spd_inverse(a.scratch + m, n, (double*)(a.scratch + work), a.scratch + out)"),
            std::string::npos);
}

TEST(InverseCodegen, EveryEntryOfTheInverseEqualsTheInterpreterOnTheHost) {
  testing::TempDir dir;
  uint32_t seed = 900;
  for (const MatrixCase& c : kCases) {
    const std::string file = dir.path() + "/" + c.name + ".yaml";
    std::ofstream(file) << policy_text(c);
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    ASSERT_EQ(kernel.score_matrices.count, 1) << c.name;
    auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                         dir.path());
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    for (int n : {2, 5, 16}) {
      for (auto [group, W] : {std::pair{1, 1}, {2, 3}}) {
        testing::RandomScoreInputs random = inputs_for(c, n, group, W, seed++);
        const int T = random.inputs.T;
        std::vector<float> expected(static_cast<size_t>(T)), actual(static_cast<size_t>(T));
        interpreted.score(random.inputs, false, expected.data());
        jit->score(random.inputs, false, actual.data());
        int finite = 0;
        for (int t = 0; t < T; ++t) {
          ASSERT_TRUE(same_bits(expected[size_t(t)], actual[size_t(t)]))
              << c.name << " n=" << n << " G=" << group << " W=" << W << " entry " << t << ": interpreter "
              << expected[size_t(t)] << ", kernel " << actual[size_t(t)];
          finite += std::isfinite(expected[size_t(t)]) ? 1 : 0;
        }
        // The test can fail: an invertible matrix has finite entries, the others none.
        EXPECT_EQ(finite, c.invertible ? T : 0) << c.name << " n=" << n;
      }
    }
  }
}

// The shipped policies' kernels run at head_dim 64 elsewhere (codegen_test.cpp); this checks the
// guard on the matrix size: above kMaxMatrixDim the host kernel allocates nothing and scores -inf
// (the interpreter refuses it with a RuntimeError, the GPU runner too, before allocating).
TEST(InverseCodegen, AHeadDimAboveTheLargestMatrixAllocatesNothing) {
  testing::TempDir dir;
  const std::string file = dir.path() + "/spd.yaml";
  std::ofstream(file) << policy_text(kCases[0]);
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  auto jit = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                       dir.path());
  testing::RandomScoreInputs random(1, 1, 3, 5);
  random.inputs.head_dim = dsl::kMaxMatrixDim + 1;  // the buffers are never read
  std::vector<float> out(3, 1.0f);
  jit->score(random.inputs, false, out.data());
  for (float x : out) EXPECT_EQ(x, -INFINITY);
}

TEST(InverseCodegen, EveryEntryOfTheInverseMatchesTheInterpreterOnTheDevice) {
  KVEVICT_GPU_TEST_SETUP(gpu);
  use_cuda_device(0);
  const testing::TempDir& dir = gpu.dir;
  uint32_t seed = 1900;
  for (const MatrixCase& c : kCases) {
    const std::string file = dir.path() + "/" + c.name + ".yaml";
    std::ofstream(file) << policy_text(c);
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    const JitKernel compiled = gpu.compile(kernel, kernel.name);
    auto jit = JitPolicyProgram::on_gpu(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                        *compiled.entry, 0);
    dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
    for (int n : {2, 16, 64}) {
      testing::RandomScoreInputs random = inputs_for(c, n, 2, 3, seed++);
      const int T = random.inputs.T;
      std::vector<float> expected(static_cast<size_t>(T)), actual(static_cast<size_t>(T));
      interpreted.score(random.inputs, false, expected.data());
      jit->score(random.inputs, false, actual.data());
      // The largest entry sets the scale: an ill-conditioned inverse's small entries carry the
      // cancellation of the large ones, so they are compared against it, not themselves.
      float scale = 0;
      for (float x : expected) scale = std::isfinite(x) ? std::max(scale, std::fabs(x)) : scale;
      for (int t = 0; t < T; ++t) {
        const float e = expected[size_t(t)], a = actual[size_t(t)];
        if (!std::isfinite(e) || !std::isfinite(a)) {
          ASSERT_EQ(e, a) << c.name << " n=" << n << " entry " << t;
          continue;
        }
        const bool conditioned = std::string(c.name) != "gram_ill_conditioned" && std::string(c.name) != "near_singular" &&
                                 std::string(c.name) != "singular_rank_2";
        ASSERT_LE(std::fabs(a - e), (conditioned ? 1e-5f : 1e-2f) * std::max(scale, 1e-30f))
            << c.name << " n=" << n << " entry " << t << ": interpreter " << e << ", GPU " << a;
      }
    }
  }
}

}  // namespace
}  // namespace kvevict::jit
#endif
