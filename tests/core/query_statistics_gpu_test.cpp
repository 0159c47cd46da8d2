// The prompt query statistics on a CUDA device (core/decode/cuda/query_statistics.h) against the
// twin (query_statistics_twin: the device's chunks on the CPU): the same count, the means bit for
// bit (the same rotation, sums and divisions in the same order), m2 to double rounding (cuBLAS sums
// the outer products in its own order). And against the host's block_query_statistics to 1e-6 of
// the scale, as the CPU test holds the twin: the host rotates with its own f32 expression. GPU only:
// skipped with the reason without CUDA or a usable device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/decode/query_statistics_block.h"
#include "core/decode/rope.h"
#include "core/model/model_config.h"
#include "gpu_test_skip.h"
#include "query_statistics_checks.h"
#include "core/decode/make_decoder.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/query_statistics.h"
#endif

namespace kvevict {
namespace {

using test::expect_close;

#if defined(KVEVICT_HAVE_CUDA)
struct Case {
  int n_heads, head_dim, n, first_position, from, chunk_rows;
  bool covariance;
  RopeStyle style;
  std::string label() const {
    return std::to_string(n_heads) + "x" + std::to_string(head_dim) + " n=" + std::to_string(n) + " first=" +
           std::to_string(first_position) + " from=" + std::to_string(from) + " chunk=" + std::to_string(chunk_rows) +
           (covariance ? " cov" : " mean") + (style == RopeStyle::HalfSplit ? " half-split" : " adjacent");
  }
};

void run_case(const Case& c, cuda::QueryStatisticsBuffer& buffer, cublasHandle_t blas, uint32_t seed) {
  SCOPED_TRACE(c.label());
  ModelConfig config;
  config.head_dim = c.head_dim;
  config.rope_style = c.style;
  Rope rope(config);
  rope.reserve(c.first_position + c.n);
  // Pre-RoPE rows around a per-channel offset (so the means are far from 0), then rotated to their
  // positions: the post-RoPE queries a decoder holds.
  const size_t row = static_cast<size_t>(c.n_heads) * c.head_dim;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> offset(-8.0f, 8.0f);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> centre(row), rows(static_cast<size_t>(c.n) * row);
  for (float& o : centre) o = offset(rng);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = centre[i % row] + noise(rng);
  for (int i = 0; i < c.n; ++i)
    for (int h = 0; h < c.n_heads; ++h)
      rope.forward(rows.data() + i * row + static_cast<size_t>(h) * c.head_dim, c.first_position + i);
  // The block-relative table: row 0 is the block's first position.
  const RopeTableView table = rope.table();
  const size_t first = static_cast<size_t>(c.first_position) * table.half;
  const size_t floats = static_cast<size_t>(c.n) * table.half;
  cuda::DeviceArray<float> queries, cos, sin;
  queries.upload(rows);
  cos.upload(std::vector<float>(table.cos + first, table.cos + first + floats));
  sin.upload(std::vector<float>(table.sin + first, table.sin + first + floats));

  const QueryStatisticsRequest request{true, c.from, c.covariance};
  const BlockQueryStatistics got = buffer.compute(queries.data(), c.n, c.first_position, request, c.n_heads, c.head_dim,
                                                  c.style, cos.data(), sin.data(), blas, c.chunk_rows);
  const BlockQueryStatistics twin = query_statistics_twin(rows.data(), c.n, c.first_position, request, c.n_heads,
                                                          c.head_dim, table, c.chunk_rows);
  const BlockQueryStatistics host =
      block_query_statistics(rows.data(), c.n, c.first_position, request, c.n_heads, c.head_dim, rope);
  EXPECT_EQ(got.count, std::clamp(c.first_position + c.n - c.from, 0, c.n));
  EXPECT_EQ(got.count, twin.count);
  EXPECT_EQ(got.from, c.from);
  EXPECT_EQ(got.covariance, c.covariance);
  EXPECT_EQ(got.n_heads, c.n_heads);
  EXPECT_EQ(got.head_dim, c.head_dim);
  ASSERT_EQ(got.mean.size(), twin.mean.size());
  ASSERT_EQ(got.m2.size(), twin.m2.size());
  for (size_t i = 0; i < got.mean.size(); ++i)
    ASSERT_EQ(got.mean[i], twin.mean[i]) << "mean " << i << " is not the twin's bits";
  expect_close(got.m2, twin.m2, 1e-12, "m2 against the twin");
  expect_close(got.mean, host.mean, 1e-6, "mean against the host");
  expect_close(got.m2, host.m2, 1e-6, "m2 against the host");
}

struct BlasDestroy {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
#endif

TEST(QueryStatisticsGpu, MatchesTheTwinsChunksAndTheHost) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  cublasHandle_t handle = nullptr;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  const std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, BlasDestroy> blas(handle);
  // One buffer for every case: it grows, and later smaller shapes reuse it.
  cuda::QueryStatisticsBuffer buffer;
  const RopeStyle adjacent = RopeStyle::AdjacentPairs, half_split = RopeStyle::HalfSplit;
  std::vector<Case> cases = {
      {1, 8, 37, 0, 0, 1, true, adjacent},             // one row per chunk: a merge per row
      {4, 16, 500, 100, 50, 7, true, half_split},      // `from` before the block, a short last chunk
      {2, 128, 3000, 0, 1000, 2048, true, adjacent},   // `from` inside, two chunks
      {3, 64, 4100, 2000, 3000, 2048, false, half_split},  // means only
      {8, 64, 2500, 0, 0, 2048, true, adjacent},       // one full chunk and a remainder
      {5, 16, 300, 10, 200, 7, true, half_split},
      {6, 8, 5000, 300, 0, 2048, false, adjacent},
      {2, 16, 50, 10, 60, 7, true, adjacent},          // `from` right after the block: no row
      {2, 16, 50, 10, 5000, 2048, false, half_split},  // `from` far after: no row
  };
  // A few random shapes on top (one row per chunk kept short: a merge per row on the CPU too).
  std::mt19937 rng(2024);
  const int dims[] = {8, 16, 64, 128}, chunks[] = {1, 7, 2048};
  for (int k = 0; k < 6; ++k) {
    Case c;
    c.n_heads = 1 + static_cast<int>(rng() % 8);
    c.head_dim = dims[rng() % 4];
    c.chunk_rows = chunks[rng() % 3];
    c.n = 1 + static_cast<int>(rng() % (c.chunk_rows == 1 ? 200 : 1500));
    c.first_position = rng() % 2 ? 0 : 1 + static_cast<int>(rng() % 3000);
    const int where = k % 3;  // `from` before, inside, after the block
    c.from = where == 0 ? static_cast<int>(rng() % (c.first_position + 1))
             : where == 1 ? c.first_position + static_cast<int>(rng() % c.n)
                          : c.first_position + c.n + static_cast<int>(rng() % 10);
    c.covariance = rng() % 2;
    c.style = rng() % 2 ? adjacent : half_split;
    cases.push_back(c);
  }
  uint32_t seed = 1;
  for (const Case& c : cases) run_case(c, buffer, blas.get(), seed++);
#endif
}

// The CUDA decoder's answer to ObservationRequest::query_statistics, in two blocks of a prompt (a
// second block continues the first), against the host rule over the same decoder's own queries,
// handed over in the same calls (every query asked for beside the statistics): per layer the count,
// and means and m2 to 1e-6 of the scale (the host's f32 rotation).
TEST(QueryStatisticsGpu, TheCudaDecoderHandsTheHostRuleOfItsOwnQueries) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  struct Check : ForwardObserver {
    QueryStatisticsRequest asked{true, 20, true};
    const ModelConfig* config = nullptr;
    int layers_checked = 0;
    ObservationRequest request() const override {
      ObservationRequest r;
      r.window = config->context_length;  // every query, for the host rule
      r.query_statistics = asked;
      return r;
    }
    void after_layer(const LayerSignals& s, KVCache&) override {
      SCOPED_TRACE("layer " + std::to_string(s.layer) + " at " + std::to_string(s.first_position));
      ASSERT_NE(s.query_statistics, nullptr);
      ASSERT_EQ(s.window, s.n_tokens);
      const Rope rope(*config);
      const BlockQueryStatistics host = block_query_statistics(s.window_queries.data(), s.n_tokens, s.first_position,
                                                               asked, config->n_heads, config->head_dim, rope);
      EXPECT_EQ(s.query_statistics->count, host.count);
      expect_close(s.query_statistics->mean, host.mean, 1e-6, "mean");
      expect_close(s.query_statistics->m2, host.m2, 1e-6, "m2");
      ++layers_checked;
    }
  } check;
  const ModelConfig config = test::gqa_test_config("query-statistics-gpu");
  check.config = &config;
  const auto model = make_random_model(config, 17);
  auto decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  std::vector<int> prompt(130);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((i * 37 + 11) % config.vocab_size);
  decoder->forward(std::span<const int>(prompt).first(50), &check);   // positions 0..49: `from` inside
  decoder->forward(std::span<const int>(prompt).subspan(50), &check);  // 50..129: every row counted
  EXPECT_EQ(check.layers_checked, 2 * config.n_layers);
#endif
}

}  // namespace
}  // namespace kvevict
