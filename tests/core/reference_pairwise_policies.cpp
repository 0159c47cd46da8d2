#include "reference_pairwise_policies.h"

#include <algorithm>
#include <cmath>

namespace kvevict::reference {

std::vector<double> rkv_redundancy(const std::vector<float>& keys, int S, int d, double threshold, bool retain_last) {
  std::vector<std::vector<double>> unit(static_cast<size_t>(S), std::vector<double>(static_cast<size_t>(d)));
  for (int t = 0; t < S; ++t) {
    double n2 = 0;
    for (int c = 0; c < d; ++c) n2 += double(keys[size_t(t) * d + c]) * keys[size_t(t) * d + c];
    const double n = std::sqrt(n2) + 1e-8;
    for (int c = 0; c < d; ++c) unit[t][c] = keys[size_t(t) * d + c] / n;
  }
  std::vector<double> column_mean(static_cast<size_t>(S), 0.0), row(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    // torch.where(mask, index, 0) then max (last) or min (first) over the row.
    long chosen = retain_last ? 0 : -1;
    for (int t = 0; t < S; ++t) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += unit[s][c] * unit[t][c];
      row[t] = s == t ? 0.0 : dot;
      const long index = row[t] > threshold ? t : 0;
      chosen = retain_last ? std::max(chosen, index) : (chosen < 0 ? index : std::min(chosen, index));
    }
    row[static_cast<size_t>(std::max(0L, chosen))] = 0.0;
    for (int t = 0; t < S; ++t) column_mean[t] += row[t] / S;
  }
  double z = 0;
  for (double v : column_mean) z += std::exp(v);
  for (double& v : column_mean) v = std::exp(v) / z;
  return column_mean;
}

KeptSets rkv(const PromptData& p, int budget, const RkvParams& rp) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (const HeadData& h : p[l]) {
      const int S = h.S, W = std::min(rp.window, h.S), N = S - W;  // N non-window keys
      std::vector<int> kept;
      if (budget >= S) {
        for (int i = 0; i < S; ++i) kept.push_back(i);
        out[l].push_back(kept);
        continue;
      }
      // Importance: per query head, softmax over the N non-window keys (the causal softmax of the
      // window rows renormalised over them), mean over the rows; the group pooled.
      std::vector<double> pooled(static_cast<size_t>(N), rp.gqa_max ? -1.0 : 0.0);
      for (int g = 0; g < h.G; ++g) {
        std::vector<double> mean(static_cast<size_t>(N), 0.0);
        for (int q = 0; q < h.W; ++q) {
          const double* row = &h.window_attention[(static_cast<size_t>(g) * h.W + q) * S];
          double z = 0;
          for (int t = 0; t < N; ++t) z += row[t];
          for (int t = 0; t < N; ++t) mean[t] += row[t] / z / h.W;
        }
        for (int t = 0; t < N; ++t) pooled[t] = rp.gqa_max ? std::max(pooled[t], mean[t]) : pooled[t] + mean[t] / h.G;
      }
      // max_pool1d(kernel, padding kernel // 2, stride 1) over the N keys (-inf padding).
      const int r = rp.kernel / 2;
      std::vector<double> importance(static_cast<size_t>(N));
      for (int t = 0; t < N; ++t) {
        double m = -1e300;
        for (int u = std::max(0, t - r); u <= std::min(N - 1, t + r); ++u) m = std::max(m, pooled[u]);
        importance[t] = m;
      }
      const std::vector<double> redundancy = rkv_redundancy(h.keys, S, h.d, rp.threshold, rp.retain_last);
      std::vector<int> order;
      for (int t = 0; t < N; ++t) order.push_back(t);
      std::vector<double> score(static_cast<size_t>(N));
      for (int t = 0; t < N; ++t) score[t] = rp.mix_lambda * importance[t] - (1 - rp.mix_lambda) * redundancy[t];
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
      order.resize(static_cast<size_t>(std::max(0, std::min(N, budget - W))));
      kept = order;
      for (int t = N; t < S; ++t) kept.push_back(t);
      std::sort(kept.begin(), kept.end());
      out[l].push_back(kept);
    }
  return out;
}

}  // namespace kvevict::reference
