// inverse(M) and randn[d, e] in the language: the checker's rules with positions, and programs
// evaluated by the interpreter against the same quantities computed directly in long double
// (ridge leverage of sketched keys; a batched [h, d, e] inverse).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/engine/gaussian_rng.h"
#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"

namespace kvevict::dsl {
namespace {

using test::Checked;

Checked check(const std::string& text, ProgramContext context = ProgramContext::Score) {
  return test::check_program_text("mat.dsl", text, context);
}

void expect_error(const std::string& text, const std::string& want, ProgramContext context = ProgramContext::Score) {
  const Checked c = check(text, context);
  EXPECT_NE(c.errors.find(want), std::string::npos) << "program:\n" << text << "\nerrors:\n" << c.errors;
}

TEST(MatrixOpsDsl, WrongAxesAndFormsAreErrorsAtTheirPosition) {
  // Not a matrix: the argument lacks e (a [d, t] "matrix" is not square over the channels).
  expect_error("x[d, t] = inverse(K[d, t])\nscore[t] = sum(d: x[d, t])",
               "mat.dsl:1:11: error: 'inverse' inverts a matrix over the channel axes d and e; its argument has shape [d, t]");
  expect_error("x[d] = inverse(mean(t: K[d, t]))\nscore[t] = sum(d: x[d]) + t",
               "mat.dsl:1:8: error: 'inverse' inverts a matrix over the channel axes d and e; its argument has shape [d]");
  // Per token: unbounded in the head; refused.
  expect_error("x[d, e, t] = inverse(K[d, t] * K[e, t])\nscore[t] = sum(d, e: x[d, e, t])",
               "mat.dsl:1:14: error: 'inverse' takes one matrix per head, not per token; its argument has shape [d, e, t]");
  expect_error("C[d, e] = sum(t: K[d, t] * K[e, t])\nx[d, e] = inverse(C[d, e], C[d, e])\nscore[t] = x[0, 0]",
               "mat.dsl:2:11: error: 'inverse' takes 1 argument, not 2");
  expect_error("C[d, e] = sum(t: K[d, t] * K[e, t]) > 0\nx[d, e] = inverse(C[d, e])\nscore[t] = t",
               "mat.dsl:2:19: error: argument 1 of 'inverse' must be a number, found a boolean");
  // randn: only as randn[d, e] (or transposed), never per token, a call or a plain name.
  expect_error("score[t] = sum(d: randn[d] * K[d, t])", "mat.dsl:1:19: error: 'randn' has axes [d, e] and takes 2 indices, not 1");
  expect_error("score[t] = sum(d: randn[d, d] * K[d, t])", "mat.dsl:1:28: error: axis 'd' is used twice in this read of 'randn'");
  expect_error("score[t] = sum(d: randn[d, t] * K[d, t])", "mat.dsl:1:28: error: index 2 of 'randn' must be axis 'd' or 'e'");
  expect_error("score[t] = randn(1, 2) + t", "mat.dsl:1:12: error: 'randn' is a Gaussian matrix [d, e]: write randn[d, e]");
  expect_error("x = randn\nscore[t] = x + t", "mat.dsl:1:5: error: 'randn' is a Gaussian matrix [d, e]; write randn[d, e]");
  expect_error("inverse[t] = t\nscore[t] = inverse[t]", "mat.dsl:1:1: error: 'inverse' is a built-in name and cannot be redefined");
  // Not in layer_weight programs (a matrix per KV head of the layer is not needed by any method).
  expect_error("layer_weight = sum(g, d, e: randn[d, e])", "randn[d, e] is not available in layer_weight programs",
               ProgramContext::LayerWeight);
  expect_error("C[g, d, e] = sum(t: K[g, d, t] * K[g, e, t])\nlayer_weight = sum(g, d, e: inverse(C[g, d, e]))",
               "'inverse' is not available in layer_weight programs", ProgramContext::LayerWeight);
}

// T tokens, d channels, keys [d][t] with standard normal entries.
struct Keys {
  int d, T;
  std::vector<float> kt;  // [d][t]
};
Keys random_keys(int d, int T, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  Keys k{d, T, std::vector<float>(static_cast<size_t>(d) * T)};
  for (float& x : k.kt) x = normal(rng);
  return k;
}

std::vector<float> run(const LoweredProgram& p, const Keys& k, int G = 1, uint64_t seed = 7) {
  EvalInputs in;
  in.ext = {.g = 1, .h = G, .q = 0, .d = k.d, .t = k.T};
  in.seed = seed;
  in.layer = 3;
  HeadSignals h;
  h.kv_head = 1;
  h.tensors[signal_index(TensorSignal::KeysPreRope)] = k.kt.data();
  h.tensors[signal_index(TensorSignal::Keys)] = k.kt.data();
  in.heads.push_back(h);
  in.scalars[static_cast<int>(ScalarSignal::HeadDim)] = static_cast<float>(k.d);
  in.scalars[static_cast<int>(ScalarSignal::T)] = static_cast<float>(k.T);
  std::vector<float> out(static_cast<size_t>(k.T));
  evaluate_scores(p, in, out.data());
  return out;
}

// Solves A x = b in long double (Gauss-Jordan, partial pivoting).
std::vector<long double> solve(std::vector<long double> a, std::vector<long double> b, int n) {
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[piv * n + c])) piv = r;
    for (int j = 0; j < n; ++j) std::swap(a[c * n + j], a[piv * n + j]);
    std::swap(b[c], b[piv]);
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const long double f = a[r * n + c] / a[c * n + c];
      for (int j = 0; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
      b[r] -= f * b[c];
    }
  }
  for (int i = 0; i < n; ++i) b[i] /= a[i * n + i];
  return b;
}

// The leverage program of policies/field/leverage.yaml (before its z-score), against the ridge
// leverage of the sketched centred keys computed directly, with the documented randn values.
TEST(MatrixOpsDsl, SketchedRidgeLeverageMatchesADirectComputation) {
  const std::string program =
      "mu[d] = mean(t: K_pre[d, t])\n"
      "x[d, t] = K_pre[d, t] - mu[d]\n"
      "k = min(KS, head_dim)\n"
      "X[e, t] = if(e < k, sum(d: x[d, t] * randn[d, e]) / sqrt(k), 0)\n"
      "C[d, e] = sum(t: X[d, t] * X[e, t]) + if(d == e, 0.01, 0)\n"
      "Ci[d, e] = inverse(C[d, e])\n"
      "Y[e, t] = sum(d: Ci[d, e] * X[d, t])\n"
      "score[t] = max(sum(e: X[e, t] * Y[e, t]), 0)\n";
  for (int ks : {3, 6, 12}) {
    std::string text = program;
    text.replace(text.find("KS"), 2, std::to_string(ks));
    const Checked c = check(text);
    ASSERT_EQ(c.errors, "");
    const Keys keys = random_keys(6, 40, 5u + ks);
    const std::vector<float> got = run(c.program, keys);
    const int d = keys.d, T = keys.T, k = std::min(ks, d);
    std::vector<long double> mu(d, 0), X(static_cast<size_t>(T) * k, 0), G(static_cast<size_t>(k) * k, 0);
    for (int c2 = 0; c2 < d; ++c2)
      for (int t = 0; t < T; ++t) mu[c2] += keys.kt[c2 * T + t] / static_cast<long double>(T);
    for (int t = 0; t < T; ++t)
      for (int e = 0; e < k; ++e) {
        long double s = 0;
        for (int c2 = 0; c2 < d; ++c2) s += (keys.kt[c2 * T + t] - mu[c2]) * kv_dsl_randn(7, 3, 1, c2, e);
        X[t * k + e] = s / std::sqrt(static_cast<long double>(k));
      }
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        for (int t = 0; t < T; ++t) G[i * k + j] += X[t * k + i] * X[t * k + j];
        if (i == j) G[i * k + j] += 0.01L;
      }
    for (int t = 0; t < T; ++t) {
      std::vector<long double> xt(X.begin() + t * k, X.begin() + (t + 1) * k);
      const std::vector<long double> y = solve(G, xt, k);
      long double lev = 0;
      for (int e = 0; e < k; ++e) lev += xt[e] * y[e];
      EXPECT_NEAR(got[t], static_cast<double>(lev), 2e-4 * std::max(1.0L, lev)) << "sketch " << ks << " token " << t;
    }
  }
}

// A batched [h, d, e] inverse: each query head's own matrix (here I + h-scaled Gram), and the
// seed chooses randn.
TEST(MatrixOpsDsl, BatchedOverQueryHeadsAndSeeded) {
  const Checked c = check(
      "C[h, d, e] = sum(t: K[d, t] * K[e, t]) * (h + 1) + if(d == e, 1, 0)\n"
      "Ci[h, d, e] = inverse(C[h, d, e])\n"
      "Y[h, e, t] = sum(d: Ci[h, d, e] * K[d, t])\n"
      "score[t] = sum(h, e: K[e, t] * Y[h, e, t])\n");
  ASSERT_EQ(c.errors, "");
  const Keys keys = random_keys(4, 10, 99);
  const std::vector<float> got = run(c.program, keys, /*G=*/3);
  const int d = keys.d, T = keys.T;
  for (int t = 0; t < T; ++t) {
    long double want = 0;
    for (int h = 0; h < 3; ++h) {
      std::vector<long double> a(static_cast<size_t>(d) * d, 0), kt(d);
      for (int i = 0; i < d; ++i) {
        kt[i] = keys.kt[i * T + t];
        for (int j = 0; j < d; ++j) {
          for (int u = 0; u < T; ++u) a[i * d + j] += static_cast<long double>(keys.kt[i * T + u]) * keys.kt[j * T + u];
          a[i * d + j] = a[i * d + j] * (h + 1) + (i == j ? 1 : 0);
        }
      }
      const std::vector<long double> y = solve(a, kt, d);
      for (int i = 0; i < d; ++i) want += kt[i] * y[i];
    }
    EXPECT_NEAR(got[t], static_cast<double>(want), 1e-5 * std::max(1.0L, want)) << t;
  }
  const Checked r = check("score[t] = sum(d, e: randn[d, e] * K[d, t] * K[e, t])");
  ASSERT_EQ(r.errors, "");
  EXPECT_NE(run(r.program, keys, 1, 1), run(r.program, keys, 1, 2));
  EXPECT_EQ(run(r.program, keys, 1, 1), run(r.program, keys, 1, 1));
  // The transposed read is the transposed matrix.
  const Checked rt = check("score[t] = sum(d, e: randn[e, d] * K[e, t] * K[d, t])");
  ASSERT_EQ(rt.errors, "");
  const std::vector<float> a = run(r.program, keys), b = run(rt.program, keys);
  for (int t = 0; t < T; ++t) EXPECT_NEAR(a[t], b[t], 1e-5 * std::max(1.0f, std::fabs(a[t])));
}

// A non-SPD matrix does not crash: NaN scores (then -infinity), as documented.
TEST(MatrixOpsDsl, NonPositiveDefiniteMatrixGivesMinusInfinity) {
  const Checked c = check(
      "Ci[d, e] = inverse(-sum(t: K[d, t] * K[e, t]) - if(d == e, 1, 0))\n"
      "score[t] = sum(d, e: Ci[d, e] * K[d, t] * K[e, t])");
  ASSERT_EQ(c.errors, "");
  for (float v : run(c.program, random_keys(3, 5, 1))) EXPECT_EQ(v, -INFINITY);
}

}  // namespace
}  // namespace kvevict::dsl
