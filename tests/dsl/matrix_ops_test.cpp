// dsl/matrix_ops.h (the SPD inverse behind `inverse(d, e: M)`) against a brute-force reference:
// Gauss-Jordan elimination with partial pivoting in long double on the symmetrised matrix, written
// independently of the Cholesky route. Also the documented fallback (jitter, then NaN), the bounds,
// and the Gaussian stream of core/engine/gaussian_rng.h (`randn[d, e]`).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/engine/gaussian_rng.h"
#include "core/util/error.h"
#include "dsl/matrix_ops.h"

namespace kvevict::dsl {
namespace {

using Matrix = std::vector<float>;

// Inverse of (M + M^T) / 2 + ridge I by Gauss-Jordan with partial pivoting; empty if singular.
std::vector<long double> brute_inverse(const Matrix& m, int n, long double ridge = 0) {
  std::vector<long double> a(static_cast<size_t>(n) * 2 * n, 0.0L);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) a[i * 2 * n + j] = 0.5L * (static_cast<long double>(m[i * n + j]) + m[j * n + i]);
    a[i * 2 * n + i] += ridge;
    a[i * 2 * n + n + i] = 1.0L;
  }
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[r * 2 * n + c]) > std::fabs(a[piv * 2 * n + c])) piv = r;
    if (a[piv * 2 * n + c] == 0.0L) return {};
    for (int j = 0; j < 2 * n; ++j) std::swap(a[c * 2 * n + j], a[piv * 2 * n + j]);
    const long double p = a[c * 2 * n + c];
    for (int j = 0; j < 2 * n; ++j) a[c * 2 * n + j] /= p;
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const long double f = a[r * 2 * n + c];
      for (int j = 0; j < 2 * n; ++j) a[r * 2 * n + j] -= f * a[c * 2 * n + j];
    }
  }
  std::vector<long double> inv(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) inv[i * n + j] = a[i * 2 * n + n + j];
  return inv;
}

// A well-conditioned SPD matrix: B B^T / n + shift I, B with standard normal entries.
Matrix random_spd(int n, unsigned seed, float shift) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> b(static_cast<size_t>(n) * n);
  for (float& x : b) x = normal(rng);
  Matrix m(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += static_cast<double>(b[i * n + k]) * b[j * n + k];
      m[i * n + j] = static_cast<float>(s / n + (i == j ? shift : 0.0f));
    }
  return m;
}

// Largest |got - want| relative to the largest |want|.
double relative_error(const Matrix& got, const std::vector<long double>& want) {
  long double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<long double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return static_cast<double>(err / scale);
}

TEST(MatrixOps, InverseMatchesGaussJordanAcrossSizes) {
  std::vector<double> work;
  for (int n : {1, 2, 3, 8, 17, 48, 64}) {
    const Matrix m = random_spd(n, 100u + n, 0.5f);
    Matrix inv(m.size());
    EXPECT_EQ(spd_inverse(m.data(), n, work, inv.data()), 0) << "n=" << n << ": no jitter for an SPD matrix";
    const auto want = brute_inverse(m, n);
    ASSERT_FALSE(want.empty());
    EXPECT_LT(relative_error(inv, want), 1e-5) << "n=" << n;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) EXPECT_EQ(inv[i * n + j], inv[j * n + i]) << "the result is exactly symmetric";
  }
}

TEST(MatrixOps, InverseTimesMatrixIsTheIdentity) {
  std::vector<double> work;
  const int n = 20;
  const Matrix m = random_spd(n, 7, 0.1f);
  Matrix inv(m.size());
  ASSERT_EQ(spd_inverse(m.data(), n, work, inv.data()), 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += static_cast<double>(m[i * n + k]) * inv[k * n + j];
      EXPECT_NEAR(s, i == j ? 1.0 : 0.0, 1e-4) << i << "," << j;
    }
}

TEST(MatrixOps, NonSymmetricInputIsSymmetrised) {
  std::vector<double> work;
  const int n = 5;
  Matrix m = random_spd(n, 3, 1.0f);
  m[0 * n + 3] += 0.25f;  // now M != M^T; the inverse is that of (M + M^T) / 2
  Matrix inv(m.size());
  ASSERT_EQ(spd_inverse(m.data(), n, work, inv.data()), 0);
  EXPECT_LT(relative_error(inv, brute_inverse(m, n)), 1e-5);
}

// A singular positive semi-definite matrix (a zero row and column, as a sketch with masked
// coordinates gives without a ridge) is inverted with the first ridge that factorises it: the
// documented lambda = 1e-7 x the largest diagonal entry.
TEST(MatrixOps, SingularMatrixGetsTheDocumentedRidge) {
  std::vector<double> work;
  const int n = 6;
  Matrix m = random_spd(n, 11, 0.5f);
  for (int j = 0; j < n; ++j) m[4 * n + j] = m[j * n + 4] = 0.0f;
  Matrix inv(m.size());
  const int step = spd_inverse(m.data(), n, work, inv.data());
  ASSERT_EQ(step, 1);
  long double scale = 0;
  for (int i = 0; i < n; ++i) scale = std::max<long double>(scale, std::fabs(m[i * n + i]));
  const auto want = brute_inverse(m, n, scale * kJitterSteps[1]);
  EXPECT_LT(relative_error(inv, want), 1e-5);
  EXPECT_NEAR(inv[4 * n + 4], 1.0 / (scale * kJitterSteps[1]), 1e-5 / (scale * kJitterSteps[1]));
}

TEST(MatrixOps, IndefiniteOrNonFiniteMatricesGiveNaNNotACrash) {
  std::vector<double> work;
  auto all_nan = [](const Matrix& x) {
    for (float v : x)
      if (!std::isnan(v)) return false;
    return true;
  };
  const Matrix indefinite = {1, 0, 0, -1};
  Matrix inv(4, 0.0f);
  EXPECT_EQ(spd_inverse(indefinite.data(), 2, work, inv.data()), -1);
  EXPECT_TRUE(all_nan(inv));
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Matrix m = random_spd(3, 5, 1.0f);
    m[4] = bad;
    Matrix out(9, 0.0f);
    EXPECT_EQ(spd_inverse(m.data(), 3, work, out.data()), -1);
    EXPECT_TRUE(all_nan(out));
  }
  const Matrix zero(9, 0.0f);  // scale 0 counts as 1: the first ridge, 1e-7 I, factorises
  Matrix out(9, 0.0f);
  EXPECT_EQ(spd_inverse(zero.data(), 3, work, out.data()), 1) << "0 + 1e-7 I is positive definite";
  EXPECT_NEAR(out[0], 1e7, 1.0);
  // Larger than the bound: refused without allocating, NaN out.
  Matrix big_out(static_cast<size_t>(kMaxMatrixDim + 1) * (kMaxMatrixDim + 1), 0.0f);
  Matrix big_in(big_out.size(), 0.0f);
  std::vector<double> fresh;
  EXPECT_EQ(spd_inverse(big_in.data(), kMaxMatrixDim + 1, fresh, big_out.data()), -1);
  EXPECT_TRUE(std::isnan(big_out[0]) && std::isnan(big_out.back()));
  EXPECT_TRUE(fresh.empty()) << "no work space for a refused matrix";
}

TEST(MatrixOps, BatchedInParallelEqualsOneByOne) {
  const int n = 64, batch = 24;  // large enough for the parallel path
  Matrix all;
  for (int b = 0; b < batch; ++b) {
    Matrix m = random_spd(n, 1000u + b, 0.3f);
    if (b == 5) m[0] = std::numeric_limits<float>::quiet_NaN();  // one failure
    if (b == 9)
      for (int j = 0; j < n; ++j) m[2 * n + j] = m[j * n + 2] = 0.0f;  // one singular
    all.insert(all.end(), m.begin(), m.end());
  }
  Matrix out(all.size());
  const InverseReport r = spd_inverse_batched(all.data(), batch, n, out.data());
  EXPECT_EQ(r.failed, 1);
  EXPECT_EQ(r.jittered, 1);
  std::vector<double> work;
  Matrix one(static_cast<size_t>(n) * n);
  for (int b = 0; b < batch; ++b) {
    spd_inverse(all.data() + static_cast<size_t>(b) * n * n, n, work, one.data());
    for (size_t i = 0; i < one.size(); ++i) {
      const float got = out[static_cast<size_t>(b) * n * n + i];
      if (std::isnan(one[i])) EXPECT_TRUE(std::isnan(got));
      else ASSERT_EQ(got, one[i]) << "matrix " << b << " entry " << i;
    }
  }
  EXPECT_EQ(spd_inverse_batched(all.data(), 0, n, out.data()).failed, 0);
}

// The interpreter's entry points: a [h, d, e] tensor is G matrices one after another; a head_dim
// beyond the bound is a run-time error before anything is allocated; randn is [d][e].
TEST(MatrixOps, InterpreterEntryPoints) {
  const int n = 4, heads = 3;
  Matrix all;
  for (int h = 0; h < heads; ++h) {
    const Matrix m = random_spd(n, 40u + h, 0.5f);
    all.insert(all.end(), m.begin(), m.end());
  }
  Matrix out(all.size());
  evaluate_inverse(all.data(), static_cast<int64_t>(all.size()), n, out.data());
  std::vector<double> work;
  Matrix one(n * n);
  for (int h = 0; h < heads; ++h) {
    spd_inverse(all.data() + h * n * n, n, work, one.data());
    for (int i = 0; i < n * n; ++i) EXPECT_EQ(out[h * n * n + i], one[i]);
  }
  EXPECT_THROW(evaluate_inverse(all.data(), 1, kMaxMatrixDim + 1, out.data()), RuntimeError);
  Matrix g(static_cast<size_t>(n) * n);
  evaluate_randn(9, 2, 1, n, g.data());
  for (int d = 0; d < n; ++d)
    for (int e = 0; e < n; ++e) EXPECT_EQ(g[d * n + e], kv_dsl_randn(9, 2, 1, d, e));
}

// randn[d, e]: the documented counter layout, standard normal moments, independence of the tuple.
TEST(GaussianStream, DocumentedLayoutAndMoments) {
  const uint64_t seed = 0x123456789abcdefull;
  // The layout, spelled out again: counter ((e << 16) | d, kv_head, layer, 2), Box-Muller.
  for (unsigned d : {0u, 7u, 300u})
    for (unsigned e : {0u, 1u, 47u}) {
      Philox4x32 ctr{{(e << 16) | d, 3u, 5u, kGaussianStream}};
      const Philox4x32 w = philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
      const double u1 = uniform_open01(w.v[0]), u2 = uniform_open01(w.v[1]);
      const float want = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
      EXPECT_EQ(kv_dsl_randn(seed, 5, 3, d, e), want);
    }
  // Moments over 64 x 64 x 8 draws: mean 0, variance 1 (5 standard errors).
  double s = 0, s2 = 0;
  int n = 0;
  for (unsigned head = 0; head < 8; ++head)
    for (unsigned d = 0; d < 64; ++d)
      for (unsigned e = 0; e < 64; ++e) {
        const double z = kv_dsl_randn(seed, 1, head, d, e);
        s += z;
        s2 += z * z;
        ++n;
      }
  const double mean = s / n, var = s2 / n - mean * mean;
  EXPECT_LT(std::fabs(mean), 5.0 / std::sqrt(n));
  EXPECT_LT(std::fabs(var - 1.0), 5.0 * std::sqrt(2.0 / n));
  // Every coordinate of the tuple matters; the transpose is another draw.
  const float base = kv_dsl_randn(seed, 1, 2, 3, 4);
  EXPECT_NE(base, kv_dsl_randn(seed + 1, 1, 2, 3, 4));
  EXPECT_NE(base, kv_dsl_randn(seed, 0, 2, 3, 4));
  EXPECT_NE(base, kv_dsl_randn(seed, 1, 0, 3, 4));
  EXPECT_NE(base, kv_dsl_randn(seed, 1, 2, 4, 3));
  EXPECT_EQ(base, kv_dsl_randn(seed, 1, 2, 3, 4));
}

}  // namespace
}  // namespace kvevict::dsl
