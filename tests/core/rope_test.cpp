// RoPE: rotation is norm-preserving, invertible, relative (q·k depends only on the offset), the
// table and direct evaluation agree, and the two pairing conventions differ as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/decode/rope.h"

namespace kvevict {
namespace {

ModelConfig rope_config(RopeStyle style) {
  ModelConfig c;
  c.head_dim = 10;
  c.rope_theta = 10000.0f;
  c.rope_style = style;
  return c;
}

std::vector<float> random_vector(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

class RopeStyles : public ::testing::TestWithParam<RopeStyle> {};

TEST_P(RopeStyles, RelativePositionsOnly) {
  Rope rope(rope_config(GetParam()));
  const auto q = random_vector(10, 1), k = random_vector(10, 2);
  auto at = [&](int m, int n) {
    auto a = q, b = k;
    rope.forward(a.data(), m);
    rope.forward(b.data(), n);
    return dot(a, b);
  };
  EXPECT_NEAR(at(7, 3), at(104, 100), 1e-4);
  EXPECT_NEAR(at(0, 0), dot(q, k), 1e-5);
  EXPECT_GT(std::abs(at(7, 3) - at(7, 4)), 1e-3);
}

TEST_P(RopeStyles, InverseUndoesForwardAndTableMatchesDirect) {
  Rope direct(rope_config(GetParam()));
  Rope table(rope_config(GetParam()));
  table.reserve(3000);
  const auto x = random_vector(10, 3);
  for (int p : {0, 5, 2999, 3000, 70000}) {
    auto a = x, b = x;
    direct.forward(a.data(), p);
    table.forward(b.data(), p);
    EXPECT_EQ(a, b) << "position " << p;
    EXPECT_NEAR(dot(a, a), dot(x, x), 1e-4);
    direct.inverse(a.data(), p);
    for (int i = 0; i < 10; ++i) EXPECT_NEAR(a[i], x[i], 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, RopeStyles, ::testing::Values(RopeStyle::AdjacentPairs, RopeStyle::HalfSplit));

TEST(Rope, PairingConventions) {
  // Unit vector on coordinate 1: adjacent pairs rotate it with coordinate 0 at frequency 1,
  // half-split with coordinate 6 at frequency theta^(-2/10).
  std::vector<float> adjacent(10, 0.0f), half(10, 0.0f);
  adjacent[1] = half[1] = 1.0f;
  Rope(rope_config(RopeStyle::AdjacentPairs)).forward(adjacent.data(), 1);
  Rope(rope_config(RopeStyle::HalfSplit)).forward(half.data(), 1);
  EXPECT_NEAR(adjacent[0], -std::sin(1.0), 1e-6);
  EXPECT_NEAR(adjacent[1], std::cos(1.0), 1e-6);
  const double f = std::pow(10000.0, -0.2);
  EXPECT_NEAR(half[1], std::cos(f), 1e-6);
  EXPECT_NEAR(half[6], std::sin(f), 1e-6);
}

TEST(Rope, ScalingChangesOnlyLowFrequencies) {
  ModelConfig c = rope_config(RopeStyle::AdjacentPairs);
  c.rope_theta = 500000.0f;
  c.head_dim = 128;
  Rope plain(c);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0f;
  Rope linear(c);
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.original_max_position = 8192;
  Rope llama3(c);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(linear.inverse_frequency(i), plain.inverse_frequency(i) / 4, 1e-12);
  EXPECT_DOUBLE_EQ(llama3.inverse_frequency(0), plain.inverse_frequency(0));          // short wavelength kept
  EXPECT_NEAR(llama3.inverse_frequency(63), plain.inverse_frequency(63) / 8, 1e-15);  // long wavelength scaled
}

}  // namespace
}  // namespace kvevict
