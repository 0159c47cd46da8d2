#pragma once
// The prompt query statistics of one forward call's block at one layer (ObservationRequest::
// query_statistics, LayerSignals::query_statistics; the Q_mean and Q_cov signals of ExpectedAttention,
// LU-KV and CAP): over the block's queries at positions >= `from`, rotated back to before RoPE, per
// query head their count, mean and (with covariance) sum of centred outer products. An observer
// merges the blocks of a prompt (merge_query_statistics: Chan, Golub and LeVeque's pairwise
// update), so it needs no query row of the prompt: a decoder whose queries live on a device hands
// over n_heads x head_dim^2 doubles per layer instead of every query (2 GiB per layer at 128K on
// the 8B geometry).
//
// One definition, three runners:
//   block_query_statistics   the host's (the CPU decoder's, and the engine's from handed rows): the
//                            reference, in the order the engine always summed them.
//   query_statistics_twin    the device's algorithm on the CPU: rows rotated back with the decoder's
//                            RoPE table (rope_rotate_pair_back, the device's bits), taken in chunks
//                            of `chunk_rows`, each chunk's mean and centred sum merged in order.
//   the CUDA decoder         the same chunks on the device (core/decode/cuda/query_statistics.h),
//                            the centred sums by cuBLAS.
// The twin and the device rotate with another f32 expression than the host (explicit fmaf, the
// decoder's table) and sum in another order (chunks merged pairwise; cuBLAS's outer products), so
// they agree with it to 1e-6 of the scale on the tests' data, not bit for bit (the signals are f32);
// the device's means equal the twin's bit for bit, its sums of outer products to 1e-12.
#include <cstdint>
#include <vector>

#include "core/decode/rope.h"

namespace kvevict {

// What an observer asks of a block's queries (ObservationRequest::query_statistics).
struct QueryStatisticsRequest {
  bool enabled = false;
  int from = 0;             // the first prompt position counted (observe.query_stats_from)
  bool covariance = false;  // m2 too (Q_cov), else the means only (Q_mean)
};

struct BlockQueryStatistics {
  int from = 0;
  bool covariance = false;
  int n_heads = 0, head_dim = 0;
  int64_t count = 0;         // rows counted (positions >= from)
  std::vector<double> mean;  // [n_heads][head_dim]; zeros while count is 0
  std::vector<double> m2;    // [n_heads][head_dim][head_dim], sum of centred outer products; empty without covariance
};

// An empty statistic (count 0) for `request`'s settings.
BlockQueryStatistics empty_query_statistics(const QueryStatisticsRequest& request, int n_heads, int head_dim);

// The statistics of `n` post-RoPE query rows [n][n_heads][head_dim] at positions first_position ..
// (those before request.from skipped), each rotated back by `rope` (Rope::inverse).
BlockQueryStatistics block_query_statistics(const float* rows, int n, int first_position,
                                            const QueryStatisticsRequest& request, int n_heads, int head_dim,
                                            const Rope& rope);

// `into` becomes the statistics of its rows and `block`'s together (pairwise update; a block of
// count 0 changes nothing). std::invalid_argument when their settings or shapes differ.
void merge_query_statistics(BlockQueryStatistics& into, const BlockQueryStatistics& block);

// The device's algorithm on the CPU (above): `rope` must hold the rows' positions.
BlockQueryStatistics query_statistics_twin(const float* rows, int n, int first_position,
                                           const QueryStatisticsRequest& request, int n_heads, int head_dim,
                                           const RopeTableView& rope, int chunk_rows);

// The row of the block where counting starts (rows before it are before `from`), in [0, n].
inline int query_statistics_first_row(int n, int first_position, int from) {
  const int skip = from - first_position;
  return skip <= 0 ? 0 : (skip >= n ? n : skip);
}

}  // namespace kvevict
