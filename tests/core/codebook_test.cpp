// SpindleKV codebook: greedy highest-degree grouping, thresholds, reconstruction, byte count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/engine/codebook.h"

namespace kvevict {
namespace {

TEST(Codebook, IdenticalDirectionsShareOneCodeAndKeepTheirNorms) {
  const int d = 4;
  std::vector<float> v = {1, 2, 3, 4, 2, 4, 6, 8, 0.5f, 1, 1.5f, 2};
  const Codebook cb = build_codebook(v.data(), 3, d, 0.98);
  EXPECT_EQ(cb.n_codes(), 1);
  std::vector<float> r(12);
  cb.reconstruct(r.data());
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(r[i], v[i], 1e-5);
  EXPECT_EQ(cb.bytes(), d * sizeof(float) + 3 * (sizeof(int32_t) + sizeof(float)));
  EXPECT_EQ(cb.plain_bytes(), 12 * sizeof(float));
}

TEST(Codebook, OrthogonalVectorsAreTheirOwnCodes) {
  std::vector<float> v = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  EXPECT_EQ(build_codebook(v.data(), 3, 3, 0.5).n_codes(), 3);
}

TEST(Codebook, GreedyTakesTheHighestDegreeFirst) {
  // Angles 0, 10, 20 degrees (cos 10deg = 0.985, cos 20deg = 0.940) with theta 0.96: the middle one
  // neighbours both ends, so one code covers all three; a lowest-index-first pass would need two.
  const double deg = M_PI / 180;
  std::vector<float> v;
  for (double a : {0.0, 10.0, 20.0}) v.push_back(std::cos(a * deg)), v.push_back(std::sin(a * deg));
  const Codebook cb = build_codebook(v.data(), 3, 2, 0.96);
  EXPECT_EQ(cb.n_codes(), 1);
  EXPECT_NEAR(cb.codes[0], std::cos(10 * deg), 1e-6);
}

TEST(Codebook, ReconstructionErrorIsBoundedByTheThreshold) {
  std::mt19937 rng(4);
  std::normal_distribution<float> n(0, 1);
  const int N = 300, d = 8;
  std::vector<float> base(5 * d);
  for (float& x : base) x = n(rng);
  std::vector<float> v(N * d);
  for (int t = 0; t < N; ++t)
    for (int i = 0; i < d; ++i) v[t * d + i] = (1 + t % 3) * (base[(t % 5) * d + i] + 0.05f * n(rng));
  const double theta = 0.95;
  const Codebook cb = build_codebook(v.data(), N, d, theta);
  EXPECT_LT(cb.n_codes(), N / 4);
  EXPECT_LT(cb.bytes(), cb.plain_bytes());
  std::vector<float> r(N * d);
  cb.reconstruct(r.data());
  for (int t = 0; t < N; ++t) {
    double err = 0;
    for (int i = 0; i < d; ++i) err += (r[t * d + i] - v[t * d + i]) * (r[t * d + i] - v[t * d + i]);
    EXPECT_LE(std::sqrt(err), cb.norm[t] * std::sqrt(2 * (1 - theta)) + 1e-4);
  }
}

TEST(Codebook, ZeroVectorsReconstructExactly) {
  std::vector<float> v = {0, 0, 1, 1};
  const Codebook cb = build_codebook(v.data(), 2, 2, 0.9);
  std::vector<float> r(4);
  cb.reconstruct(r.data());
  EXPECT_EQ(r[0], 0);
  EXPECT_EQ(r[1], 0);
  EXPECT_NEAR(r[2], 1, 1e-6);
}

}  // namespace
}  // namespace kvevict
