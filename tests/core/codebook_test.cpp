// SpindleKV codebook: greedy highest-degree grouping, thresholds, reconstruction, byte count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/engine/codebook.h"
#include "core/util/error.h"

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

// Algorithm 1 written out as the spec states it (policies.md §4.2): the whole similarity matrix,
// then per round a scan for the node of highest remaining degree (the first such) and every
// remaining neighbour's degree recounted against the nodes removed. build_codebook's parallel
// upper triangle, mirrored rows and heap must give exactly its codes, indices and norms.
Codebook spec_codebook(const std::vector<float>& x, int n, int d, double theta) {
  Codebook cb;
  cb.dim = d;
  cb.index.assign(n, -1);
  cb.norm.assign(n, 0.0f);
  std::vector<float> unit(static_cast<size_t>(n) * d, 0.0f);
  for (int t = 0; t < n; ++t) {
    double s = 0;
    for (int i = 0; i < d; ++i) s += static_cast<double>(x[t * d + i]) * x[t * d + i];
    const double m = std::sqrt(s);
    cb.norm[t] = static_cast<float>(m);
    if (m > 0)
      for (int i = 0; i < d; ++i) unit[t * d + i] = static_cast<float>(x[t * d + i] / m);
  }
  std::vector<std::vector<char>> adj(n, std::vector<char>(n, 0));
  for (int a = 0; a < n; ++a) {
    adj[a][a] = 1;
    for (int b = a + 1; b < n; ++b) {
      float dot = 0.0f;  // an f32 fma chain in element order, as the library defines the cosine
      for (int i = 0; i < d; ++i) dot = std::fma(unit[a * d + i], unit[b * d + i], dot);
      adj[a][b] = adj[b][a] = dot > theta;
    }
  }
  std::vector<char> alive(n, 1);
  for (int left = n; left > 0;) {
    int c = -1, best = -1;
    for (int t = 0; t < n; ++t) {
      if (!alive[t]) continue;
      int degree = 0;
      for (int u = 0; u < n; ++u) degree += alive[u] && adj[t][u];
      if (degree > best) c = t, best = degree;
    }
    const int32_t code = cb.n_codes();
    cb.codes.insert(cb.codes.end(), unit.begin() + c * d, unit.begin() + (c + 1) * d);
    std::vector<int> removed;
    for (int t = 0; t < n; ++t)
      if (alive[t] && adj[c][t]) removed.push_back(t), cb.index[t] = code;
    for (int t : removed) alive[t] = 0;
    left -= static_cast<int>(removed.size());
  }
  return cb;
}

TEST(Codebook, TheParallelGraphAndTheHeapGiveTheSpecsGreedyCodebook) {
  std::mt19937 rng(9);
  std::normal_distribution<float> normal;
  for (int round = 0; round < 12; ++round) {
    const int n = 1 + static_cast<int>(rng() % (round < 6 ? 60 : 300)), d = 1 + static_cast<int>(rng() % 40);
    const int directions = 1 + static_cast<int>(rng() % 12);
    std::vector<float> base(static_cast<size_t>(directions) * d), x(static_cast<size_t>(n) * d);
    for (float& v : base) v = normal(rng);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < d; ++i)  // near a direction, a zero vector now and then
        x[t * d + i] = rng() % 17 == 0 ? 0.0f : base[(t % directions) * d + i] + 0.3f * normal(rng);
    for (const double theta : {0.3, 0.8, 0.95}) {
      const Codebook want = spec_codebook(x, n, d, theta), got = build_codebook(x.data(), n, d, theta);
      ASSERT_EQ(got.index, want.index) << "n " << n << " d " << d << " theta " << theta;
      ASSERT_EQ(got.codes, want.codes) << "n " << n << " d " << d << " theta " << theta;
      ASSERT_EQ(got.norm, want.norm);
    }
  }
}

// The graph takes n^2 bits: a set of vectors whose graph would pass 4 GiB is refused before any
// allocation, naming the limit.
TEST(Codebook, RefusesASimilarityGraphOverItsMemoryLimit) {
  const int n = 200000;  // 200000^2 bits = 4.66 GiB
  const std::vector<float> x(static_cast<size_t>(n), 1.0f);
  try {
    build_codebook(x.data(), n, 1, 0.9);
    FAIL() << "a 4.66 GiB graph was built";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("GiB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
