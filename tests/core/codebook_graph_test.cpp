// SpindleKV's similarity graph (core/engine/codebook_graph.h): the host's 16-lane builder and the
// element body the twin and the CUDA kernel run give the same bits (sizes around the lane and word
// widths, repeated and zero vectors, a theta equal to a cosine that occurs: strictly greater), a
// builder handed to build_codebook is the one used, and the CUDA builder's bits are the host's
// (GPU only, skipped with the reason otherwise).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/engine/codebook.h"
#include "core/engine/codebook_graph.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/engine/cuda/codebook_graph.h"
#endif

namespace kvevict {
namespace {

// n unit vectors of dim near a few directions (some exact repeats, some zero), [n][dim].
std::vector<float> unit_vectors(int n, int dim, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> base(4 * static_cast<size_t>(dim));
  for (float& x : base) x = normal(rng);
  std::vector<float> unit(static_cast<size_t>(n) * dim, 0.0f);
  for (int t = 0; t < n; ++t) {
    const unsigned kind = rng() % 8;
    if (kind == 7) continue;  // zero
    double s = 0;
    float* u = unit.data() + static_cast<size_t>(t) * dim;
    for (int i = 0; i < dim; ++i) {
      u[i] = base[(t % 4) * static_cast<size_t>(dim) + i] + (kind < 3 ? 0.0f : 0.1f * normal(rng));
      s += double(u[i]) * u[i];
    }
    for (int i = 0; i < dim; ++i) u[i] = static_cast<float>(u[i] / std::sqrt(s));
  }
  return unit;
}

std::vector<uint64_t> element_body_graph(const std::vector<float>& unit, int n, int dim, double theta) {
  const size_t words = codebook_graph_words(n);
  std::vector<uint64_t> graph(static_cast<size_t>(n) * words);
  for (int a = 0; a < n; ++a)
    for (size_t w = 0; w < words; ++w)
      graph[a * words + w] = codebook_graph_word(unit.data(), n, dim, theta, a, static_cast<int64_t>(w));
  return graph;
}

TEST(CodebookGraph, TheHostsLanesAndTheElementBodyGiveTheSameBits) {
  std::mt19937 rng(29);
  int checked = 0, at_theta = 0;
  for (int dim : {3, 8, 64})
    for (int n : {1, 15, 16, 17, 63, 64, 65, 130, 300}) {
      const std::vector<float> unit = unit_vectors(n, dim, rng);
      // theta: a cosine that occurs (between two noisy vectors), so "strictly greater" is tested.
      double theta = 0.9;
      if (n > 5) theta = codebook_dot(unit.data() + 3 * static_cast<size_t>(dim), unit.data() + 5 * static_cast<size_t>(dim), dim);
      const std::vector<uint64_t> host = host_similarity_graph(unit.data(), n, dim, theta);
      const std::vector<uint64_t> body = element_body_graph(unit, n, dim, theta);
      ASSERT_EQ(host, body) << "n " << n << " dim " << dim;
      const size_t words = codebook_graph_words(n);
      for (int a = 0; a < n; ++a) {
        EXPECT_TRUE(host[a * words + a / 64] >> (a % 64) & 1) << "the diagonal";
        for (int b = 0; b < n; ++b) {
          const bool ab = host[a * words + b / 64] >> (b % 64) & 1, ba = host[b * words + a / 64] >> (a % 64) & 1;
          ASSERT_EQ(ab, ba) << "symmetric: " << a << ", " << b;
          if (a != b && codebook_dot(unit.data() + size_t(a) * dim, unit.data() + size_t(b) * dim, dim) == theta) {
            EXPECT_FALSE(ab) << "a cosine equal to theta is no edge";
            ++at_theta;
          }
        }
      }
      ++checked;
    }
  EXPECT_EQ(checked, 27);
  EXPECT_GT(at_theta, 0);
}

// A builder that records its calls and gives the element body's graph, or (planted) no edge at all.
class RecordingGraph final : public SimilarityGraphBuilder {
 public:
  explicit RecordingGraph(bool no_edges) : no_edges_(no_edges) {}
  std::vector<uint64_t> build(const float* unit, int n, int dim, double theta) const override {
    ++calls;
    std::vector<uint64_t> g = element_body_graph(std::vector<float>(unit, unit + size_t(n) * dim), n, dim, theta);
    if (no_edges_) {
      const size_t words = codebook_graph_words(n);
      for (int a = 0; a < n; ++a)
        for (size_t w = 0; w < words; ++w) g[a * words + w] = w == size_t(a) / 64 ? uint64_t{1} << (a % 64) : 0;
    }
    return g;
  }
  mutable int calls = 0;

 private:
  bool no_edges_;
};

TEST(CodebookGraph, ABuilderHandedToBuildCodebookIsTheOneUsed) {
  std::mt19937 rng(5);
  const int n = 200, dim = 16;
  std::vector<float> x = unit_vectors(n, dim, rng);
  for (size_t i = 0; i < x.size(); ++i) x[i] *= 1.0f + static_cast<float>(i % 7);  // norms other than 1
  const Codebook host = build_codebook(x.data(), n, dim, 0.95);
  const RecordingGraph same(false), planted(true);
  const Codebook by_builder = build_codebook(x.data(), n, dim, 0.95, &same);
  EXPECT_EQ(same.calls, 1);
  EXPECT_EQ(by_builder.codes, host.codes);
  EXPECT_EQ(by_builder.index, host.index);
  EXPECT_EQ(by_builder.norm, host.norm);
  ASSERT_LT(host.n_codes(), n / 2);  // the set has near directions: codes are shared
  EXPECT_EQ(build_codebook(x.data(), n, dim, 0.95, &planted).n_codes(), n) << "no edge: every vector its own code";
}

TEST(CodebookGraph, AGraphOfTheWrongSizeIsRefused) {
  class Short final : public SimilarityGraphBuilder {
    std::vector<uint64_t> build(const float*, int n, int, double) const override {
      return std::vector<uint64_t>(static_cast<size_t>(n));  // a word short per row past 64 vectors
    }
  } short_graph;
  std::vector<float> x(100 * 4, 1.0f);
  EXPECT_THROW(build_codebook(x.data(), 100, 4, 0.9, &short_graph), std::logic_error);
}

// The CUDA builder against the host's, bit for bit, on sets the size of a long head's.
TEST(CodebookGraphGpu, TheDevicesGraphIsTheHosts) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  std::mt19937 rng(41);
  for (const cuda::GraphKernel kernel : {cuda::GraphKernel::PerWord, cuda::GraphKernel::Tiled}) {
    const auto device = cuda::make_cuda_similarity_graph(kernel);
    // sizes around the tile (64 rows, 32 elements at a time) and the word: partial tiles in both
    // directions, a dimension that is not a multiple of the element chunk, one vector
    for (const auto& [n, dim] : {std::pair{1, 8}, std::pair{65, 8}, std::pair{127, 33}, std::pair{1000, 64},
                                 std::pair{3000, 128}}) {
      const std::vector<float> unit = unit_vectors(n, dim, rng);
      const double theta = n > 5 ? codebook_dot(unit.data() + 3 * size_t(dim), unit.data() + 5 * size_t(dim), dim) : 0.9;
      ASSERT_EQ(device->build(unit.data(), n, dim, theta), host_similarity_graph(unit.data(), n, dim, theta))
          << "kernel " << static_cast<int>(kernel) << " n " << n << " dim " << dim;
    }
  }
#endif
}

}  // namespace
}  // namespace kvevict
