#include "core/engine/attention_signals.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/decode/simd_math.h"

namespace kvevict {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Cache entries are in ascending position order after prefill and after positional selection;
// then a query sees a prefix of the entries and the softmax needs no per-entry mask.
bool ascending(const int32_t* positions, int T) {
  for (int t = 1; t < T; ++t)
    if (positions[t] < positions[t - 1]) return false;
  return true;
}

// row[0, n) = softmax(row[0, n)) (logits already scaled), row[n, T) = 0.
void softmax_prefix(float* row, int n, int T) {
  std::fill(row + n, row + T, 0.0f);
  if (n == 0) return;
  const float m = simd::max(row, n);
  const float sum = simd::exp_shift_sum(row, n, m);
  simd::scale(row, n, 1.0f / sum);
}

// Softmax over the entries visible to a query at `qpos` when positions are in any order.
void softmax_masked(float* row, const int32_t* positions, int32_t qpos, int T) {
  float m = kNegInf;
  for (int t = 0; t < T; ++t)
    if (positions[t] <= qpos) m = std::max(m, row[t]);
  if (m == kNegInf) {  // nothing visible
    std::fill(row, row + T, 0.0f);
    return;
  }
  for (int t = 0; t < T; ++t)
    if (positions[t] > qpos) row[t] = m;  // any finite value; zeroed below
  simd::exp_shift_sum(row, T, m);
  float sum = 0.0f;
  for (int t = 0; t < T; ++t) {
    if (positions[t] > qpos) row[t] = 0.0f;
    sum += row[t];
  }
  simd::scale(row, T, 1.0f / sum);
}

}  // namespace

void compute_window_attention(const float* queries, int W, int n_heads, int query_position0, int kv_head, int group,
                              const float* keys, const int32_t* positions, int T, int d, float* out, bool causal,
                              bool scaled) {
  if (W <= 0 || group <= 0) return;
  if (T == 0) return;
  const float scale = scaled ? 1.0f / std::sqrt(static_cast<float>(d)) : 1.0f;
  // All logits of the group in one product, [G*W][d] x [T][d]^T -> out [G*W][T], so that BLAS
  // packs the T keys once per KV head (not once per query head); the group's query rows are
  // gathered first because a head's window rows lie n_heads * d apart.
  static thread_local std::vector<float> gathered;
  gathered.resize(static_cast<size_t>(group) * W * d);
  for (int g = 0; g < group; ++g)
    for (int w = 0; w < W; ++w)
      std::memcpy(gathered.data() + (static_cast<size_t>(g) * W + w) * d,
                  queries + (static_cast<size_t>(w) * n_heads + kv_head * group + g) * d, sizeof(float) * d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, group * W, T, d, scale, gathered.data(), d, keys, d, 0.0f, out, T);
  const bool sorted = !causal || ascending(positions, T);
  for (int g = 0; g < group; ++g) {
    for (int w = 0; w < W; ++w) {
      float* row = out + (static_cast<size_t>(g) * W + w) * T;
      const int32_t qpos = query_position0 + w;
      if (!causal) {
        softmax_prefix(row, T, T);  // every entry visible (NACL's proxy rows see later proxy tokens)
      } else if (sorted) {
        const int visible = static_cast<int>(std::upper_bound(positions, positions + T, qpos) - positions);
        softmax_prefix(row, visible, T);
      } else {
        softmax_masked(row, positions, qpos, T);
      }
    }
  }
}

}  // namespace kvevict
