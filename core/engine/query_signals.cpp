#include "core/engine/query_signals.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/engine/attention_signals.h"

namespace kvevict {

void gather_window_queries(const float* rows, int W, int n_heads, int kv_head, int group, int d, float* out) {
  for (int g = 0; g < group; ++g)
    for (int w = 0; w < W; ++w)
      std::memcpy(out + (static_cast<size_t>(g) * W + w) * d,
                  rows + (static_cast<size_t>(w) * n_heads + kv_head * group + g) * d, sizeof(float) * d);
}

void gather_window_queries_pre_rope(const float* rows, int W, int n_heads, int kv_head, int group, int d,
                                    const Rope& rope, int position0, float* out) {
  gather_window_queries(rows, W, n_heads, kv_head, group, d, out);
  for (int g = 0; g < group; ++g)
    for (int w = 0; w < W; ++w) rope.inverse(out + (static_cast<size_t>(g) * W + w) * d, position0 + w);
}

void window_attention_outputs(const float* A, int group, int W, const float* values, int T, int d, float* out) {
  if (group * W == 0 || d == 0) return;
  if (T == 0) {
    std::fill(out, out + static_cast<size_t>(group) * W * d, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, group * W, d, T, 1.0f, A, T, values, d, 0.0f, out, d);
}

void window_query_signal(TensorSignal id, const WindowQueries& q, int kv_head, int group, const Rope& rope,
                         const float* A, const float* keys, const float* values, const int32_t* positions, int T, int d,
                         bool causal, std::vector<float>& out) {
  out.resize(static_cast<size_t>(group) * q.W * d);
  if (id == TensorSignal::WindowQueryRows) {
    gather_window_queries(q.rows, q.W, q.n_heads, kv_head, group, d, out.data());
  } else if (id == TensorSignal::WindowQueryRowsPreRope) {
    gather_window_queries_pre_rope(q.rows, q.W, q.n_heads, kv_head, group, d, rope, q.position0, out.data());
  } else {
    std::vector<float> own;
    if (!A) {
      own.resize(static_cast<size_t>(group) * q.W * T);
      compute_window_attention(q.rows, q.W, q.n_heads, q.position0, kv_head, group, keys, positions, T, d, own.data(),
                               causal);
      A = own.data();
    }
    window_attention_outputs(A, group, q.W, values, T, d, out.data());
  }
}

std::vector<double> average_rope_rotation(const ModelConfig& config, int p0, int n) {
  const int d = config.head_dim, half = d / 2;
  const Rope rope(config);  // the scaled frequencies the decoder rotates with
  std::vector<double> R(static_cast<size_t>(d) * d, 0.0);
  for (int i = 0; i < half; ++i) {
    double c = 0, s = 0;
    for (int k = 0; k < n; ++k) {
      const double angle = static_cast<double>(p0 + k) * rope.inverse_frequency(i);
      c += std::cos(angle);
      s += std::sin(angle);
    }
    c /= n;
    s /= n;
    const int a = config.rope_style == RopeStyle::AdjacentPairs ? 2 * i : i;
    const int b = config.rope_style == RopeStyle::AdjacentPairs ? 2 * i + 1 : i + half;
    // rope: x_a' = x_a cos - x_b sin, x_b' = x_a sin + x_b cos (rope.cpp), averaged.
    R[static_cast<size_t>(a) * d + a] = c;
    R[static_cast<size_t>(a) * d + b] = -s;
    R[static_cast<size_t>(b) * d + a] = s;
    R[static_cast<size_t>(b) * d + b] = c;
  }
  return R;
}

void QueryStatistics::reset(int n_layers, int n_heads, int head_dim, bool covariance, int from) {
  heads_ = n_heads;
  d_ = head_dim;
  covariance_ = covariance;
  from_ = std::max(0, from);
  layers_.assign(n_layers, empty_query_statistics({true, from_, covariance_}, n_heads, head_dim));
}

void QueryStatistics::record(int layer, const float* rows, int n, int first_position, const Rope& rope) {
  merge(layer, block_query_statistics(rows, n, first_position, request(), heads_, d_, rope));
}

void QueryStatistics::merge(int layer, const BlockQueryStatistics& block) {
  merge_query_statistics(layers_[layer], block);
}

void QueryStatistics::head_statistics(int layer, int kv_head, int group, const double* R, float* mean,
                                      float* cov) const {
  const BlockQueryStatistics& L = layers_[layer];
  const int d = d_;
  const double inv_n = L.count > 0 ? 1.0 / static_cast<double>(L.count) : 0.0;
  std::vector<double> c(static_cast<size_t>(d) * d), rc(c.size());
  for (int g = 0; g < group; ++g) {
    const int h = kv_head * group + g;
    const double* mu = L.mean.data() + static_cast<size_t>(h) * d;
    for (int a = 0; a < d; ++a) {
      double v = mu[a];
      if (R) {
        v = 0;
        for (int b = 0; b < d; ++b) v += R[static_cast<size_t>(a) * d + b] * mu[b];
      }
      mean[static_cast<size_t>(g) * d + a] = static_cast<float>(v);
    }
    if (!cov) continue;
    const double* m2 = L.m2.data() + static_cast<size_t>(h) * d * d;
    for (size_t k = 0; k < c.size(); ++k) c[k] = m2[k] * inv_n;
    if (R) {  // R c R^T
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) {
          double s = 0;
          for (int k = 0; k < d; ++k) s += R[static_cast<size_t>(a) * d + k] * c[static_cast<size_t>(k) * d + b];
          rc[static_cast<size_t>(a) * d + b] = s;
        }
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b) {
          double s = 0;
          for (int k = 0; k < d; ++k) s += rc[static_cast<size_t>(a) * d + k] * R[static_cast<size_t>(b) * d + k];
          c[static_cast<size_t>(a) * d + b] = s;
        }
    }
    for (size_t k = 0; k < c.size(); ++k) cov[static_cast<size_t>(g) * d * d + k] = static_cast<float>(c[k]);
  }
}

}  // namespace kvevict
