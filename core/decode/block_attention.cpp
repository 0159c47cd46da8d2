#include "core/decode/block_attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/decode/cpu_ops.h"

namespace kvevict {

namespace {

constexpr int kQueryTile = 64;

// Softmax of the first `valid` entries of row[0, cols) in place; the rest becomes 0.
void softmax_prefix(float* row, int valid, int cols) {
  float max_score = row[0];
  for (int t = 1; t < valid; ++t) max_score = std::max(max_score, row[t]);
  float sum = 0.0f;
  for (int t = 0; t < valid; ++t) {
    row[t] = std::exp(row[t] - max_score);
    sum += row[t];
  }
  const float inv = 1.0f / sum;
  for (int t = 0; t < valid; ++t) row[t] *= inv;
  std::fill(row + valid, row + cols, 0.0f);
}

// One tile of query rows [i0, i1) of query head h.
void attend_tile(const KVCache& cache, const BlockAttentionArgs& a, int h, int i0, int i1, std::vector<float>& scores,
                 float* column_sums) {
  const int d = cache.head_dim();
  const int kv = h / a.group;
  const int len = cache.length(a.layer, kv);
  const int old = len - a.n;  // entries that precede the block
  const int rows = i1 - i0;
  const int cols = old + i1;  // keys visible to the tile's last query
  const int stride = a.n_heads * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float* keys = cache.keys(a.layer, kv);
  const float* values = cache.values(a.layer, kv);
  const float* q = a.queries + static_cast<size_t>(i0) * stride + static_cast<size_t>(h) * d;
  float* out = a.out + static_cast<size_t>(i0) * stride + static_cast<size_t>(h) * d;
  scores.resize(static_cast<size_t>(rows) * cols);

  if (rows == 1) {
    // Decoding: one query, memory-bound; plain loops avoid BLAS call overhead.
    float* s = scores.data();
    for (int t = 0; t < cols; ++t) s[t] = scale * cpu::dot(q, keys + static_cast<size_t>(t) * d, d);
    softmax_prefix(s, cols, cols);
    std::fill(out, out + d, 0.0f);
    for (int t = 0; t < cols; ++t) {
      const float p = s[t];
      const float* v = values + static_cast<size_t>(t) * d;
#pragma omp simd
      for (int j = 0; j < d; ++j) out[j] += p * v[j];
    }
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, d, scale, q, stride, keys, d, 0.0f,
                scores.data(), cols);
    for (int r = 0; r < rows; ++r) softmax_prefix(scores.data() + static_cast<size_t>(r) * cols, old + i0 + r + 1, cols);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, cols, 1.0f, scores.data(), cols, values, d, 0.0f,
                out, stride);
  }
  if (column_sums) {
    for (int r = 0; r < rows; ++r) {
      const float* s = scores.data() + static_cast<size_t>(r) * cols;
#pragma omp simd
      for (int t = 0; t < cols; ++t) column_sums[t] += s[t];
    }
  }
}

}  // namespace

void block_attention(const KVCache& cache, const BlockAttentionArgs& a) {
  for (int kv = 0; kv < cache.n_kv_heads(); ++kv) {
    if (cache.length(a.layer, kv) < a.n) throw std::logic_error("block_attention: block K/V not in the cache");
  }
  const int tiles = (a.n + kQueryTile - 1) / kQueryTile;
  const int items = a.n_heads * tiles;
  // Small blocks (tiny models, short contexts) stay on the calling thread.
  const double macs = 2.0 * a.n_heads * a.n * (cache.length(a.layer, 0)) * cache.head_dim();
  const int threads = macs < (1 << 18) ? 1 : std::max(1, std::min(omp_get_max_threads(), items));

  // Per-thread column sums, reduced at the end, so tiles of one head can run on different threads.
  std::vector<std::vector<std::vector<float>>> partial;
  if (a.column_sums) {
    partial.assign(threads, std::vector<std::vector<float>>(a.n_heads));
    for (auto& per_thread : partial) {
      for (int h = 0; h < a.n_heads; ++h) per_thread[h].assign(cache.length(a.layer, h / a.group), 0.0f);
    }
  }

  // BLAS is single-threaded (cpu::set_threads), so each OpenMP thread runs its own tile products.
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores;
    const int me = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < items; ++item) {
      const int h = item / tiles;
      const int tile = item % tiles;
      const int i0 = tile * kQueryTile;
      const int i1 = std::min(a.n, i0 + kQueryTile);
      attend_tile(cache, a, h, i0, i1, scores, a.column_sums ? partial[me][h].data() : nullptr);
    }
  }

  if (a.column_sums) {
    a.column_sums->assign(a.n_heads, {});
    for (int h = 0; h < a.n_heads; ++h) {
      std::vector<float>& sums = (*a.column_sums)[h];
      sums = std::move(partial[0][h]);
      for (int t = 1; t < threads; ++t) {
        for (size_t c = 0; c < sums.size(); ++c) sums[c] += partial[t][h][c];
      }
    }
  }
}

}  // namespace kvevict
