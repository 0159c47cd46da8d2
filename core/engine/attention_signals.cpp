#include "core/engine/attention_signals.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvevict {

void compute_window_attention(const float* queries, int W, int n_heads, int query_position0, int kv_head, int group,
                              const float* keys, const int32_t* positions, int T, int d, float* out,
                              bool causal) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> logits(T);
  for (int g = 0; g < group; ++g) {
    const int h = kv_head * group + g;
    for (int w = 0; w < W; ++w) {
      const float* q = queries + (static_cast<size_t>(w) * n_heads + h) * d;
      const int32_t qpos = query_position0 + w;
      float* row = out + (static_cast<size_t>(g) * W + w) * T;
      float max_logit = -std::numeric_limits<float>::infinity();
      for (int t = 0; t < T; ++t) {
        if (causal && positions[t] > qpos) {
          logits[t] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const float* k = keys + static_cast<size_t>(t) * d;
        float dot = 0.0f;
        for (int i = 0; i < d; ++i) dot += q[i] * k[i];
        logits[t] = dot * scale;
        max_logit = std::max(max_logit, logits[t]);
      }
      if (max_logit == -std::numeric_limits<float>::infinity()) {  // nothing visible
        std::fill(row, row + T, 0.0f);
        continue;
      }
      float sum = 0.0f;
      for (int t = 0; t < T; ++t) {
        const float e = causal && positions[t] > qpos ? 0.0f : std::exp(logits[t] - max_logit);
        row[t] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      for (int t = 0; t < T; ++t) row[t] *= inv;
    }
  }
}

void compute_row_norms(const float* rows, int T, int d, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* r = rows + static_cast<size_t>(t) * d;
    double s = 0;
    for (int i = 0; i < d; ++i) s += static_cast<double>(r[i]) * r[i];
    out[t] = static_cast<float>(std::sqrt(s));
  }
}

}  // namespace kvevict
