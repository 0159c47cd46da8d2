// The vectorised helpers against libm / plain loops, including the scalar tails (n % 16 != 0).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#pragma GCC diagnostic ignored "-Wpsabi"  // the helpers use 64-byte vector types
#include "core/decode/simd_math.h"

namespace kvevict {
namespace {

std::vector<float> random_floats(int n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(SimdMath, ExpOfNonPositiveArguments) {
  auto x = random_floats(1000, -80.0f, 0.0f, 1);
  x[0] = 0.0f;
  x[1] = -1e-8f;
  auto y = x;
  const float sum = simd::exp_shift_sum(y.data(), 999, 0.0f);  // 999: vector body plus a tail
  double want_sum = 0;
  for (int i = 0; i < 999; ++i) {
    const double want = std::exp(double(x[i]));
    EXPECT_NEAR(y[i], want, 4e-7 * want) << x[i];
    want_sum += want;
  }
  EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
  EXPECT_EQ(y[999], x[999]);  // beyond n: untouched
  EXPECT_LT(simd::exp_nonpositive(-1000.0f), 1e-37f);
  EXPECT_LT(simd::exp_nonpositive(-std::numeric_limits<float>::infinity()), 1e-37f);
}

TEST(SimdMath, SiluMulMatchesTheDefinition) {
  auto g = random_floats(203, -30.0f, 30.0f, 2);
  g[0] = 0.0f, g[1] = 100.0f, g[2] = -100.0f;
  const auto up = random_floats(203, -2.0f, 2.0f, 3);
  auto out = g;
  simd::silu_mul(out.data(), up.data(), 203);
  for (int i = 0; i < 203; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * up[i];
    EXPECT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::abs(want))) << g[i];
  }
}

TEST(SimdMath, MaxDotAxpyScale) {
  for (int n : {1, 7, 16, 33, 100}) {
    const auto a = random_floats(n, -5.0f, 5.0f, n), b = random_floats(n, -5.0f, 5.0f, n + 1);
    float mx = a[0];
    double dot = 0;
    for (int i = 0; i < n; ++i) mx = std::max(mx, a[i]), dot += double(a[i]) * b[i];
    EXPECT_EQ(simd::max(a.data(), n), mx) << n;
    EXPECT_NEAR(simd::dot(a.data(), b.data(), n), dot, 1e-4) << n;
    auto y = b;
    simd::axpy(0.5f, a.data(), y.data(), n);
    simd::scale(y.data(), n, 2.0f);
    for (int i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], 2.0f * (b[i] + 0.5f * a[i]));
  }
}

}  // namespace
}  // namespace kvevict
