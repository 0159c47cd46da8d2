// rank, sorted_cumsum and quantile (dsl/sort_ops.h): the checker's rules with positions, and the
// interpreter against a direct O(n^2) reference of the documented order (ties by index, NaN last)
// along t and along d, on data with many ties, infinities and NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"
#include "dsl/sort_ops.h"

namespace kvevict::dsl {
namespace {

using test::Checked;

Checked check(const std::string& text, ProgramContext context = ProgramContext::Score) {
  return test::check_program_text("sort.dsl", text, context);
}

void expect_error(const std::string& text, const std::string& want, ProgramContext context = ProgramContext::Score) {
  const Checked c = check(text, context);
  EXPECT_NE(c.errors.find(want), std::string::npos) << "program:\n" << text << "\nerrors:\n" << c.errors;
}

TEST(SortOpsDsl, WrongFormsAreErrorsAtTheirPosition) {
  expect_error("score[t] = rank(key_norm[t])", "sort.dsl:1:12: error: 'rank' runs along an axis: write rank(t: x[t])");
  expect_error("score[t] = quantile(key_norm[t], 0.5) + t",
               "sort.dsl:1:12: error: 'quantile' runs along an axis: write quantile(t: x[t], 0.5)");
  expect_error("score[t] = rank(t, d: K[d, t])", "sort.dsl:1:20: error: 'rank' runs along exactly one axis (no window variable)");
  expect_error("score[t] = rank(k in -1 .. 1: key_norm[t + k])",
               "sort.dsl:1:17: error: 'rank' runs along exactly one axis (no window variable)");
  expect_error("score[t] = rank(t: key_norm[t]) + rank(z: key_norm[t])", "sort.dsl:1:40: error: 'z' is not an axis here");
  expect_error("score[t] = sorted_cumsum(t: key_norm[t], 2)",
               "sort.dsl:1:12: error: 'sorted_cumsum' takes one operand after ':', e.g. sorted_cumsum(t: x[t])");
  expect_error("score[t] = quantile(t: key_norm[t]) + t",
               "sort.dsl:1:12: error: 'quantile' takes an operand and a level after ':', e.g. quantile(t: x, 0.5)");
  expect_error("score[t] = quantile(d: K[d, t], key_norm[t])",
               "sort.dsl:1:33: error: the level of 'quantile' must be a scalar number (a constant, parameter or scalar signal), found [t]");
  expect_error("m = quantile(t: key_norm[t], true)\nscore[t] = m + t", "sort.dsl:1:30: error: the level of 'quantile' must be a scalar number");
  expect_error("x[t] = rank(d: key_norm[t])\nscore[t] = x[t]",
               "sort.dsl:1:8: error: 'rank' along [d], but the operand does not depend on that axis");
  expect_error("score[t] = rank(t: key_norm[t] > 1)", "sort.dsl:1:32: error: 'rank' needs numbers, found a boolean");
  expect_error("score[t] = quantile(t: key_norm[t], 0.5)", "sort.dsl:1:21: error: axis 't' is already bound here");
  expect_error("c[s, t] = sum(d: K[d, s] * K[d, t])\nm[s, t] = rank(s: c[s, t])\nscore[t] = mean(s: m[s, t])",
               "sort.dsl:2:11: error: 'rank' of a token-pair value (axes s and t) is not available");
  expect_error("score[t] = max(k in -1 .. 1: rank(d: K[d, t + k]))", "sort.dsl:1:30: error: 'rank' cannot be used inside a token window");
  expect_error("score[t] = sum(t: key_norm[t], 1)", "sort.dsl:1:32: error: 'sum' takes one operand after ':'");
  expect_error("rank[t] = t\nscore[t] = rank[t]", "sort.dsl:1:1: error: 'rank' is a built-in name and cannot be redefined");
  // The layer_weight context has axis g; a quantile over the layer's heads checks.
  EXPECT_EQ(check("layer_weight = quantile(g: mean(t: key_norm[g, t]), 0.5)", ProgramContext::LayerWeight).errors, "");
}

// The documented descending order: j before i.
bool before(float xj, int j, float xi, int i) {
  if (std::isnan(xj)) return std::isnan(xi) && j < i;
  if (std::isnan(xi)) return true;
  return xj > xi || (xj == xi && j < i);
}

// Keys [d][t] with values from a small set (ties), some infinities and NaNs.
std::vector<float> tied_values(int d, int T, unsigned seed, bool nans) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<float> v(static_cast<size_t>(d) * T);
  for (float& x : v) {
    const int k = pick(rng);
    x = k < 12 ? 0.25f * float(k % 6) - 0.5f : k < 17 ? float(k) * 0.37f : k == 17 ? std::numeric_limits<float>::infinity()
        : k == 18 ? -0.0f : (nans ? std::numeric_limits<float>::quiet_NaN() : 1.0f);
  }
  return v;
}

std::vector<float> run(const LoweredProgram& p, const std::vector<float>& kt, int d, int T) {
  EvalInputs in;
  in.ext = {.g = 1, .h = 1, .q = 0, .d = d, .t = T};
  HeadSignals h;
  h.tensors[signal_index(TensorSignal::Keys)] = kt.data();
  in.heads.push_back(h);
  in.scalars[static_cast<int>(ScalarSignal::T)] = static_cast<float>(T);
  in.scalars[static_cast<int>(ScalarSignal::HeadDim)] = static_cast<float>(d);
  return evaluate(p, in);  // the raw output (a NaN stays NaN)
}

// x[j] for j < n along the chosen axis of K[d][t] at the other index `at`.
std::vector<float> slice(const std::vector<float>& kt, int d, int T, bool along_t, int at) {
  std::vector<float> x;
  for (int j = 0; j < (along_t ? T : d); ++j) x.push_back(along_t ? kt[static_cast<size_t>(at) * T + j] : kt[static_cast<size_t>(j) * T + at]);
  return x;
}

double ref_rank(const std::vector<float>& x, int i) {
  int r = 0;
  for (int j = 0; j < int(x.size()); ++j) r += before(x[j], j, x[i], i);
  return r;
}
double ref_cumsum(const std::vector<float>& x, int i) {
  long double s = 0;
  for (int j = 0; j < int(x.size()); ++j)
    if (before(x[j], j, x[i], i)) s += x[j];
  return static_cast<double>(s);
}
double ref_quantile(std::vector<float> x, double p) {
  if (std::any_of(x.begin(), x.end(), [](float v) { return std::isnan(v); })) return std::nan("");
  std::sort(x.begin(), x.end());
  p = std::clamp(p, 0.0, 1.0);
  const double pos = p * double(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (pos - double(lo)) * (double(x[hi]) - double(x[lo]));
}

void expect_same(double want, float got, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got;
    return;
  }
  if (std::isinf(want)) {
    EXPECT_EQ(double(got), want) << what;
    return;
  }
  EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want))) << what;
}

TEST(SortOpsDsl, RankAndSortedCumsumAlongTMatchTheReference) {
  const int d = 3, T = 41;
  for (unsigned seed : {1u, 2u, 3u}) {
    const std::vector<float> kt = tied_values(d, T, seed, true);
    for (int c = 0; c < d; ++c) {
      const std::string ch = std::to_string(c);
      const std::string k = "sum(d: if(d == " + ch + ", K[d, t], 0))";
      const Checked r = check("x[t] = " + k + "\nscore[t] = rank(t: x[t])");
      ASSERT_EQ(r.errors, "");
      // The cumulative sum of a finite copy (an infinite sum is the reference's too, but a NaN one is NaN).
      const Checked m = check("k[t] = " + k + "\nx[t] = if(k[t] != k[t] or k[t] > 1e30, 0.5, k[t])\nscore[t] = sorted_cumsum(t: x[t])");
      ASSERT_EQ(m.errors, "");
      const std::vector<float> ranks = run(r.program, kt, d, T), mass = run(m.program, kt, d, T);
      std::vector<float> x = slice(kt, d, T, true, c), finite = x;
      for (float& v : finite) v = (std::isnan(v) || v > 1e30f) ? 0.5f : v;
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(ranks[t], ref_rank(x, t)) << "seed " << seed << " channel " << c << " t " << t;
        expect_same(ref_cumsum(finite, t), mass[t], "cumsum at t " + std::to_string(t));
      }
    }
  }
}

TEST(SortOpsDsl, RankAndQuantileAlongDMatchTheReference) {
  const int d = 9, T = 13;
  const std::vector<float> kt = tied_values(d, T, 11u, true);
  for (int c = 0; c < d; ++c) {
    const Checked r = check("r[d, t] = rank(d: K[d, t])\nscore[t] = sum(d: if(d == " + std::to_string(c) + ", r[d, t], 0))");
    ASSERT_EQ(r.errors, "");
    const std::vector<float> got = run(r.program, kt, d, T);
    for (int t = 0; t < T; ++t) EXPECT_EQ(got[t], ref_rank(slice(kt, d, T, false, t), c)) << "channel " << c << " t " << t;
  }
  for (double p : {-0.5, 0.0, 0.1, 0.5, 0.77, 1.0, 3.0}) {
    const Checked q = check("score[t] = quantile(d: K[d, t], " + std::to_string(p) + ")");
    ASSERT_EQ(q.errors, "");
    const std::vector<float> got = run(q.program, kt, d, T);
    for (int t = 0; t < T; ++t)
      expect_same(ref_quantile(slice(kt, d, T, false, t), std::stod(std::to_string(p))), got[t], "p " + std::to_string(p));
  }
}

TEST(SortOpsDsl, QuantileAlongTAndTheFewestEntriesReachingAMass) {
  const int d = 2, T = 57;
  const std::vector<float> kt = tied_values(d, T, 5u, false);
  for (double p : {0.0, 0.25, 0.5, 0.9, 1.0}) {
    const Checked q = check("m[d] = quantile(t: K[d, t], " + std::to_string(p) + ")\nscore[t] = sum(d: if(d == 1, m[d], 0)) + 0 * t");
    ASSERT_EQ(q.errors, "");
    expect_same(ref_quantile(slice(kt, d, T, true, 1), std::stod(std::to_string(p))), run(q.program, kt, d, T)[0], "quantile over t");
  }
  // The fewest entries (by descending x, ties by index) whose mass reaches 0.6 of the total.
  const Checked f = check("k[t] = sum(d: if(d == 0, K[d, t], 0))\nx[t] = if(k[t] > 1e30, 0, abs(k[t]))\n"
                          "total = sum(t: x[t])\nscore[t] = if(sorted_cumsum(t: x[t]) < 0.6 * total, 1, 0)");
  ASSERT_EQ(f.errors, "");
  const std::vector<float> kept = run(f.program, kt, d, T);
  std::vector<float> x = slice(kt, d, T, true, 0);
  for (float& v : x) v = v > 1e30f ? 0.0f : std::fabs(v);
  std::vector<int> order(T);
  for (int i = 0; i < T; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
  double total = 0;
  for (float v : x) total += v;
  std::vector<float> want(T, 0.0f);
  double mass = 0;
  for (int i : order) {
    if (mass >= 0.6 * total) break;
    want[i] = 1.0f;
    mass += x[i];
  }
  int count = 0;
  for (int t = 0; t < T; ++t) count += want[t] == 1.0f;
  EXPECT_GT(count, 1);
  EXPECT_LT(count, T);
  for (int t = 0; t < T; ++t) EXPECT_EQ(kept[t], want[t]) << "t " << t;
}

TEST(SortOpsDsl, DumpNamesTheOperation) {
  const Checked c = check("m = quantile(t: key_norm[t], 0.5)\nscore[t] = rank(t: key_norm[t]) + m");
  ASSERT_EQ(c.errors, "");
  const std::string dump = c.program.dump();
  EXPECT_NE(dump.find("sort s0 [t]"), std::string::npos) << dump;
  EXPECT_NE(dump.find("sort s2 [t]"), std::string::npos) << dump;
}

}  // namespace
}  // namespace kvevict::dsl
