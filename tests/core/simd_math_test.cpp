// The vectorised helpers against libm / plain loops, including the scalar tails (n % 16 != 0).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
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


TEST(SimdMath, LogMatchesLibmToAboutOneUlp) {
  // Wide magnitudes, values next to 1 (results near 0 must keep relative accuracy), and the
  // special inputs that must take the fallback exactly.
  std::vector<float> x;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> expo(-120.0f, 120.0f), near(-1e-3f, 1e-3f);
  for (int i = 0; i < 4000; ++i) x.push_back(std::exp2(expo(rng)));
  for (int i = 0; i < 1000; ++i) x.push_back(1.0f + near(rng));
  for (float v : {1.0f, 2.0f, 0.5f, 1.41421356f, 1.41421368f, 0.70710677f, 1e-10f, 1e-10f + 1e-17f, 3.4e38f})
    x.push_back(v);
  const float specials[] = {0.0f, -0.0f, -1.0f, 1e-40f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (float v : specials) x.push_back(v);
  std::vector<float> y(x.size());
  simd::log_array(x.data(), static_cast<long>(x.size()), y.data(), [](float v) { return std::log(v); });
  double worst_ulps = 0;
  for (size_t i = 0; i + std::size(specials) < x.size(); ++i) {
    const double want = std::log(static_cast<double>(x[i]));
    const double ulp = std::max(std::abs(want), 1e-30) * 1.1920929e-7;
    worst_ulps = std::max(worst_ulps, std::abs(y[i] - want) / ulp);
  }
  EXPECT_LT(worst_ulps, 2.0);
  for (size_t k = 0; k < std::size(specials); ++k) {
    const size_t i = x.size() - std::size(specials) + k;
    const float want = std::log(x[i]);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(y[i])) << x[i];
    else EXPECT_EQ(y[i], want) << x[i];
  }
}

}  // namespace
}  // namespace kvevict
