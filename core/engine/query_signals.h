#pragma once
// The query-side signals of the policy language (core/engine/signals.h):
//   Q[h, q, d]      the window queries as the window attention A uses them (post-RoPE),
//   Q_pre[h, q, d]  the same rows rotated back by their own positions (pre-RoPE, as K_pre is made),
//   O[h, q, d]      the window attention outputs, sum over t of A[h, q, t] * V[d, t] (before W_o),
//   Q_mean[h, d]    the mean and Q_cov[h, d, e] the covariance of the prompt's pre-RoPE queries.
// h runs over the group's query heads kv_head * group .. + group - 1 (group 1 with unfold_gqa:
// kv_head is then the query head). Every buffer is [group][W][d] or [group][d] (x [d]), the
// signal layout of signals.h; none grows with the cache.
//
// Prompt statistics (ExpectedAttention, kvpress get_query_statistics): for each layer and query
// head, the mean and the covariance divided by n of the pre-RoPE queries of the prompt positions
// p >= from, accumulated block by block while the prefill runs (double; per block a two-pass
// mean / centred sum, merged with Chan's formula), so the memory is n_layers * n_heads * (d + d^2)
// doubles, the covariance part only when asked for: never the prompt's queries themselves.
// Rotation FutureMean: mu' = R mu, cov' = R cov R^T with R the mean of the model's own RoPE
// matrices over positions p0 .. p0 + n - 1 (its pairing and scaled frequencies, rope.h), which is
// block diagonal: pair i is [[c_i, -s_i], [s_i, c_i]], c_i / s_i the mean cos / sin of p * w_i.
#include <cstdint>
#include <vector>

#include "core/decode/query_statistics_block.h"
#include "core/decode/rope.h"
#include "core/engine/signals.h"
#include "core/engine/window_observation.h"
#include "core/model/model_config.h"

namespace kvevict {

// rows: [W][n_heads][d] post-RoPE (the decoder's window_queries layout). out: [group][W][d].
void gather_window_queries(const float* rows, int W, int n_heads, int kv_head, int group, int d, float* out);
// The same rows, each rotated back by its position position0 + w (Rope::inverse). out: [group][W][d].
void gather_window_queries_pre_rope(const float* rows, int W, int n_heads, int kv_head, int group, int d,
                                    const Rope& rope, int position0, float* out);
// out[g][w][c] = sum_t A[g][w][t] * values[t][c]; A: [group][W][T] (softmax rows), values: [T][d].
void window_attention_outputs(const float* A, int group, int W, const float* values, int T, int d, float* out);

// Q, Q_pre or O (`id`) of KV head kv_head from the window rows `q`, into out ([group][W][d]). O reads
// the window attention `A` ([group][W][T]) when given, else computes it from `keys` (the decode
// indicator may read O but not A), and `values` ([T][d]).
void window_query_signal(TensorSignal id, const WindowQueries& q, int kv_head, int group, const Rope& rope,
                         const float* A, const float* keys, const float* values, const int32_t* positions, int T, int d,
                         bool causal, std::vector<float>& out);

// R = mean over p in [p0, p0 + n) of the model's RoPE matrix at position p: [d][d] row-major, so
// that R x = mean_p rope(x, p). n >= 1.
std::vector<double> average_rope_rotation(const ModelConfig& config, int p0, int n);

class QueryStatistics {
 public:
  // Forgets everything. covariance false: only the means are kept. Positions < from are skipped.
  void reset(int n_layers, int n_heads, int head_dim, bool covariance, int from);
  bool active() const { return !layers_.empty(); }
  // What a decoder is asked for, per block (ObservationRequest::query_statistics).
  QueryStatisticsRequest request() const { return {active(), from_, covariance_}; }
  // Adds the n query rows [n][n_heads][d] (post-RoPE, at positions first_position ..), rotating
  // each back with `rope` first; rows before `from` are skipped (block_query_statistics).
  void record(int layer, const float* rows, int n, int first_position, const Rope& rope);
  // Adds a block's statistics as a decoder made them (LayerSignals::query_statistics):
  // std::invalid_argument when its settings or shape are not this accumulator's.
  void merge(int layer, const BlockQueryStatistics& block);
  // Queries accumulated for `layer`.
  int64_t count(int layer) const { return layers_[layer].count; }
  // mean: [group][d], cov (may be null): [group][d][d] of query heads kv_head * group .., rotated by
  // R ([d][d], null: none). Zeros while nothing was accumulated.
  void head_statistics(int layer, int kv_head, int group, const double* R, float* mean, float* cov) const;

 private:
  std::vector<BlockQueryStatistics> layers_;  // every prompt block merged so far, per layer
  int heads_ = 0, d_ = 0, from_ = 0;
  bool covariance_ = false;
};

}  // namespace kvevict
