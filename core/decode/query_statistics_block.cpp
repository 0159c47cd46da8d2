// See query_statistics_block.h.
#include "core/decode/query_statistics_block.h"

#include <cblas.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace kvevict {

BlockQueryStatistics empty_query_statistics(const QueryStatisticsRequest& request, int n_heads, int head_dim) {
  BlockQueryStatistics s;
  s.from = request.from;
  s.covariance = request.covariance;
  s.n_heads = n_heads;
  s.head_dim = head_dim;
  s.mean.assign(static_cast<size_t>(n_heads) * head_dim, 0.0);
  if (request.covariance) s.m2.assign(static_cast<size_t>(n_heads) * head_dim * head_dim, 0.0);
  return s;
}

// One head's mean and centred sum of `m` pre-RoPE rows (`pre`, [m][row] at head offset h * d),
// into out.mean / out.m2 at head h: the block's own mean (two passes), as the engine always did.
static void head_moments(const float* pre, int m, size_t row, int h, int d, bool covariance,
                         std::vector<double>& centred, BlockQueryStatistics& out) {
  double* mean = out.mean.data() + static_cast<size_t>(h) * d;
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < d; ++c) mean[c] += pre[i * row + static_cast<size_t>(h) * d + c];
  const double nb = m;
  for (int c = 0; c < d; ++c) mean[c] /= nb;
  if (!covariance) return;
  centred.resize(static_cast<size_t>(m) * d);
  for (int i = 0; i < m; ++i)
    for (int c = 0; c < d; ++c)
      centred[static_cast<size_t>(i) * d + c] = pre[i * row + static_cast<size_t>(h) * d + c] - mean[c];
  cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, m, 1.0, centred.data(), d, centred.data(), d, 0.0,
              out.m2.data() + static_cast<size_t>(h) * d * d, d);
}

BlockQueryStatistics block_query_statistics(const float* rows, int n, int first_position,
                                            const QueryStatisticsRequest& request, int n_heads, int head_dim,
                                            const Rope& rope) {
  BlockQueryStatistics out = empty_query_statistics(request, n_heads, head_dim);
  const int skip = query_statistics_first_row(n, first_position, request.from);
  const int m = n - skip;
  if (m <= 0) return out;
  const size_t row = static_cast<size_t>(n_heads) * head_dim;
  std::vector<float> pre(static_cast<size_t>(m) * row);
  std::memcpy(pre.data(), rows + skip * row, sizeof(float) * pre.size());
  for (int i = 0; i < m; ++i)
    for (int h = 0; h < n_heads; ++h)
      rope.inverse(pre.data() + i * row + static_cast<size_t>(h) * head_dim, first_position + skip + i);
  std::vector<double> centred;
  for (int h = 0; h < n_heads; ++h) head_moments(pre.data(), m, row, h, head_dim, request.covariance, centred, out);
  out.count = m;
  return out;
}

void merge_query_statistics(BlockQueryStatistics& into, const BlockQueryStatistics& block) {
  if (into.from != block.from || into.covariance != block.covariance || into.n_heads != block.n_heads ||
      into.head_dim != block.head_dim || block.mean.size() != into.mean.size() || block.m2.size() != into.m2.size())
    throw std::invalid_argument("query statistics: a block of " + std::to_string(block.n_heads) + " heads x " +
                                std::to_string(block.head_dim) + " from position " + std::to_string(block.from) +
                                (block.covariance ? " with" : " without") + " covariance merged into " +
                                std::to_string(into.n_heads) + " x " + std::to_string(into.head_dim) + " from " +
                                std::to_string(into.from) + (into.covariance ? " with" : " without"));
  if (block.count <= 0) return;
  const int d = into.head_dim;
  const double na = static_cast<double>(into.count), nb = static_cast<double>(block.count), n_ab = na + nb;
  for (int h = 0; h < into.n_heads; ++h) {
    double* mean = into.mean.data() + static_cast<size_t>(h) * d;
    const double* mean_b = block.mean.data() + static_cast<size_t>(h) * d;
    if (into.covariance) {
      double* m2 = into.m2.data() + static_cast<size_t>(h) * d * d;
      const double* block_m2 = block.m2.data() + static_cast<size_t>(h) * d * d;
      for (int a = 0; a < d; ++a) {
        const double delta_a = mean_b[a] - mean[a];
        for (int b = 0; b < d; ++b)
          m2[static_cast<size_t>(a) * d + b] +=
              block_m2[static_cast<size_t>(a) * d + b] + delta_a * (mean_b[b] - mean[b]) * na * nb / n_ab;
      }
    }
    for (int c = 0; c < d; ++c) mean[c] += (mean_b[c] - mean[c]) * nb / n_ab;
  }
  into.count += block.count;
}

BlockQueryStatistics query_statistics_twin(const float* rows, int n, int first_position,
                                           const QueryStatisticsRequest& request, int n_heads, int head_dim,
                                           const RopeTableView& rope, int chunk_rows) {
  if (chunk_rows <= 0) throw std::invalid_argument("query statistics twin: chunk_rows must be positive");
  BlockQueryStatistics out = empty_query_statistics(request, n_heads, head_dim);
  const int skip = query_statistics_first_row(n, first_position, request.from);
  if (n > skip && first_position + n > rope.positions)
    throw std::invalid_argument("query statistics twin: the RoPE table holds " + std::to_string(rope.positions) +
                                " positions, the rows reach " + std::to_string(first_position + n));
  const size_t row = static_cast<size_t>(n_heads) * head_dim;
  const int half = head_dim / 2;
  std::vector<float> pre;
  std::vector<double> centred;
  for (int r0 = skip; r0 < n; r0 += chunk_rows) {
    const int m = std::min(chunk_rows, n - r0);
    pre.assign(rows + r0 * row, rows + (r0 + m) * row);
    for (int i = 0; i < m; ++i) {
      const int p = first_position + r0 + i;
      for (int h = 0; h < n_heads; ++h)
        for (int k = 0; k < half; ++k) {
          int a, b;
          rope_pair_elements(rope.style, k, half, &a, &b);
          float* x = pre.data() + i * row + static_cast<size_t>(h) * head_dim;
          const size_t t = static_cast<size_t>(p) * rope.half + k;
          rope_rotate_pair_back(&x[a], &x[b], rope.cos[t], rope.sin[t]);
        }
    }
    // The chunk's moments by the host's per-head rule: the same mean bits as the device's (row
    // order, then one division); its centred sums are cuBLAS's, in cuBLAS's order.
    BlockQueryStatistics chunk = empty_query_statistics(request, n_heads, head_dim);
    for (int h = 0; h < n_heads; ++h)
      head_moments(pre.data(), m, row, h, head_dim, request.covariance, centred, chunk);
    chunk.count = m;
    merge_query_statistics(out, chunk);
  }
  return out;
}

}  // namespace kvevict
