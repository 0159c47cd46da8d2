// The second token axis s and the second channel axis e: same-kind renaming in reads, token-pair
// reductions evaluated in tiles of s (never a T x T array), fused contractions, sin and cos, and
// the checker's rules for them (file:line:col). References are written out in double.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>

#include "dsl/pair_keys_test.h"
#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"

namespace kvevict::dsl {
namespace {

using test::Checked;

Checked check(const std::string& text) {
  return test::check_program_text("pair.dsl", text);
}

using test::Keys;
using test::random_keys;

std::vector<float> run(const LoweredProgram& p, const Keys& keys) { return test::run_on_keys(p, keys); }

TEST(PairwiseAxes, SumOverSOfDotProductsMatchesDoubleAcrossTiles) {
  // T = 150 crosses the 64-row tiles of s twice.
  const Keys keys = random_keys(150, 8, 1);
  auto c = check("score[t] = sum(s: sum(d: K[d, s] * K[d, t]))");
  ASSERT_EQ(c.errors, "");
  const auto got = run(c.program, keys);
  for (int t = 0; t < keys.T; ++t) {
    double want = 0;
    for (int s = 0; s < keys.T; ++s)
      for (int d = 0; d < keys.D; ++d) want += keys.at(d, s) * keys.at(d, t);
    EXPECT_NEAR(got[t], want, 1e-3 * (1 + std::fabs(want))) << t;
  }
}

// R-KV's redundancy (cal_similarity), written with definitions over s and t.
const char* kRedundancy =
    "n[t] = sqrt(sum(d: K[d, t] * K[d, t])) + 1e-8\n"
    "u[d, t] = K[d, t] / n[t]\n"
    "c[s, t] = if(s == t, 0, sum(d: u[d, s] * u[d, t]))\n"
    "last[s] = max(t: if(c[s, t] > 0.5, t, 0))\n"
    "score[t] = mean(s: if(t == last[s], 0, c[s, t]))\n";

TEST(PairwiseAxes, CosineRedundancyWithLastAboveThresholdMatchesDouble) {
  const Keys keys = random_keys(130, 6, 2);
  auto c = check(kRedundancy);
  ASSERT_EQ(c.errors, "");
  const auto got = run(c.program, keys);
  const int T = keys.T;
  std::vector<double> norm(T), sim(size_t(T) * T), want(T, 0.0);
  for (int t = 0; t < T; ++t) {
    double s2 = 0;
    for (int d = 0; d < keys.D; ++d) s2 += keys.at(d, t) * keys.at(d, t);
    norm[t] = std::sqrt(s2) + 1e-8;
  }
  int above = 0;
  for (int s = 0; s < T; ++s) {
    int last = 0;
    for (int t = 0; t < T; ++t) {
      double dot = 0;
      for (int d = 0; d < keys.D; ++d) dot += keys.at(d, s) * keys.at(d, t);
      sim[size_t(s) * T + t] = s == t ? 0.0 : dot / (norm[s] * norm[t]);
      if (sim[size_t(s) * T + t] > 0.5) last = t, ++above;
    }
    sim[size_t(s) * T + last] = 0;  // a row with none zeroes column 0 (the code's quirk)
    for (int t = 0; t < T; ++t) want[t] += sim[size_t(s) * T + t] / T;
  }
  ASSERT_GT(above, T / 3) << "the keys must exercise the threshold";
  for (int t = 0; t < T; ++t) EXPECT_NEAR(got[t], want[t], 1e-5) << t;
}

TEST(PairwiseAxes, ChannelAxisEGramMatrixAndVectorContraction) {
  const Keys keys = random_keys(40, 5, 3);
  auto c = check(
      "C[d, e] = sum(t: K[d, t] * K[e, t])\n"
      "y[d, t] = sum(e: C[d, e] * K[e, t])\n"
      "score[t] = sum(d: y[d, t] * K[d, t])\n");
  ASSERT_EQ(c.errors, "");
  const auto got = run(c.program, keys);
  std::vector<double> C(25);
  for (int d = 0; d < 5; ++d)
    for (int e = 0; e < 5; ++e)
      for (int t = 0; t < keys.T; ++t) C[d * 5 + e] += keys.at(d, t) * keys.at(e, t);
  for (int t = 0; t < keys.T; ++t) {
    double want = 0;
    for (int d = 0; d < 5; ++d)
      for (int e = 0; e < 5; ++e) want += C[d * 5 + e] * keys.at(e, t) * keys.at(d, t);
    EXPECT_NEAR(got[t], want, 1e-3 * (1 + std::fabs(want))) << t;
  }
}

TEST(PairwiseAxes, FusedContractionIsBitIdenticalToTheMaterialisedProduct) {
  const Keys keys = random_keys(300, 16, 4);
  // `+ 0` keeps the product alive on its own (not only contracted), so it is materialised.
  for (const char* pair : {"sum(d: K[d, t] * K[d, s])", "mean(d: K[d, t] * K[d, s])"}) {
    const std::string fused = std::string("x[s, t] = ") + pair + "\nscore[t] = max(s: x[s, t])\n";
    std::string plain = fused;
    plain.replace(plain.find("K[d, t] * K[d, s]"), 17, "(K[d, t] * K[d, s] + 0)");
    auto a = check(fused), b = check(plain);
    ASSERT_EQ(a.errors + b.errors, "");
    EXPECT_EQ(run(a.program, keys), run(b.program, keys)) << pair;
  }
  auto f = check("m[d] = mean(t: K[d, t] * K[d, t])\nscore[t] = sum(d: m[d] * K[d, t])");
  auto g = check("m[d] = mean(t: K[d, t] * K[d, t] + 0)\nscore[t] = sum(d: m[d] * K[d, t] + 0)");
  ASSERT_EQ(f.errors + g.errors, "");
  EXPECT_EQ(run(f.program, keys), run(g.program, keys));
}

TEST(PairwiseAxes, ATokenPairIsNeverMaterialised) {
  // T = 8192: a T x T float array would be 256 MiB; the tiles hold 64 rows of s at a time.
  const Keys keys = random_keys(8192, 2, 5);
  auto c = check("score[t] = max(s: if(s == t, -1, sum(d: K[d, s] * K[d, t])))");
  ASSERT_EQ(c.errors, "");
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto got = run(c.program, keys);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "peak RSS grew by " << (after.ru_maxrss - before.ru_maxrss) << " KiB";
  for (int t : {0, 4095, 8191}) {
    double want = -1e30;
    for (int s = 0; s < keys.T; ++s) {
      if (s == t) continue;
      want = std::max(want, keys.at(0, s) * keys.at(0, t) + keys.at(1, s) * keys.at(1, t));
    }
    EXPECT_NEAR(got[t], want, 1e-4 * (1 + std::fabs(want))) << t;
  }
}

TEST(PairwiseAxes, SinCosAndAxisValues) {
  const Keys keys = random_keys(20, 3, 6);
  auto c = check("score[t] = sin(K[d0, t]) + cos(t * 0.25) + mean(s: s * 0 + sin(s))\n");
  ASSERT_NE(c.errors, "") << "d0 is not an axis";
  c = check("score[t] = sum(d: sin(K[d, t]) * cos(d + 0.5)) + cos(t * 0.25) + mean(s: sin(s))\n");
  ASSERT_EQ(c.errors, "");
  const auto got = run(c.program, keys);
  double ms = 0;
  for (int s = 0; s < keys.T; ++s) ms += std::sin(double(s)) / keys.T;
  for (int t = 0; t < keys.T; ++t) {
    double want = std::cos(t * 0.25) + ms;
    for (int d = 0; d < 3; ++d) want += std::sin(keys.at(d, t)) * std::cos(d + 0.5);
    EXPECT_NEAR(got[t], want, 1e-5) << t;
  }
}

TEST(PairwiseAxes, OldPoliciesMayStillNameDefinitionsSAndE) {
  auto c = check("s[t] = key_norm[t] * 2\ne = 3\nscore[t] = s[t] + e\n");
  EXPECT_EQ(c.errors, "");
  auto hidden = check("s[t] = key_norm[t]\nscore[t] = mean(s: key_norm[s])\n");
  EXPECT_NE(hidden.errors.find("'s' is not an axis here"), std::string::npos) << hidden.errors;
}

TEST(PairwiseAxes, CheckerErrorsAtTheirPositions) {
  auto expect_error = [](const std::string& text, const std::string& message) {
    auto c = check(text);
    EXPECT_NE(c.errors.find(message), std::string::npos) << text << "\n" << c.errors;
  };
  // Wrong kind: K's axes are (channel, token).
  expect_error("score[t] = sum(d: K[t, d])", "pair.dsl:1:21: error: index 1 of 'K' must be axis 'd' or 'e' (K has axes [d, t]), found 't'");
  expect_error("score[t] = sum(e: K[e, q])", "pair.dsl:1:24: error: index 2 of 'K' must be axis 's' or 't' (K has axes [d, t]), found 'q'");
  // Unbound s and e.
  expect_error("score[t] = sum(d: K[d, s])", "pair.dsl:1:24: error: axis 's' is not bound here");
  expect_error("score[t] = sum(d: K[e, t])", "pair.dsl:1:21: error: axis 'e' is not bound here");
  // The score is per token t.
  expect_error("score[s] = key_norm[s]", "pair.dsl:1:1: error: 'score' must be declared per token: score[t] = ...");
  // A diagonal and a transposed token pair.
  expect_error("x[s, t] = s - t\nscore[t] = sum(s: x[t, s])", "pair.dsl:2:19: error: 'x' is a token-pair tensor [s, t]; read it with s and t in place");
  expect_error("x[s, t] = s - t\nscore[t] = sum(s: x[s, s])", "pair.dsl:2:24: error: axis 's' is used twice in this read of 'x'");
  // The bound of a token pair: at most one more axis, never q.
  expect_error("x[h, q, s, t] = A[h, q, s] * A[h, q, t]\nscore[t] = sum(h, q, s: x[h, q, s, t])",
               "pair.dsl:1:28: error: this value has shape [h, q, s, t]: a token-pair value (axes s and t) may carry at most one more axis");
  expect_error("score[t] = sum(s, d, e: K[d, s] * K[e, t])",
               "error: this value has shape [d, e, s, t]: a token-pair value (axes s and t) may carry at most one more axis");
  // var over s of a token pair, and a shifted s.
  expect_error("score[t] = var(s: s * t)", "pair.dsl:1:12: error: 'var' over s of a token-pair value is not available");
  expect_error("score[t] = sum(d: sum(s: max(k in -1 .. 1: K[d, s + k] * K[d, t + k])))", "pair.dsl:1:49: error: only the token axis t can be shifted");
  // Definitions may be declared over the new axes, in canonical order.
  expect_error("x[t, s] = s\nscore[t] = 0", "pair.dsl:1:6: error: axes must be listed in the order h, q, d, e, c, s, t");
}

}  // namespace
}  // namespace kvevict::dsl

namespace kvevict::dsl {
namespace {

// A renamed read of a computed array is a view of it: the array must outlive the view (random[s]
// is the Random node's own array, freed after its last reader otherwise).
TEST(PairwiseAxes, RenamedViewsKeepTheirArrayAlive) {
  const Keys keys = random_keys(40, 2, 7);
  auto a = check("score[t] = mean(s: random[s] + t)");
  auto b = check("m = mean(t: random[t])\nscore[t] = m + t");
  ASSERT_EQ(a.errors + b.errors, "");
  const auto x = run(a.program, keys), y = run(b.program, keys);
  for (int t = 0; t < keys.T; ++t) EXPECT_NEAR(x[t], y[t], 1e-5) << t;
}

}  // namespace
}  // namespace kvevict::dsl
