#include "reference_channel_policies.h"

#include <algorithm>
#include <cmath>

namespace kvevict::reference {

std::vector<double> think_channel_scores(const std::vector<QueryRow>& rows, const std::vector<float>& keys, int kv_head,
                                         int G, int d) {
  std::vector<double> q2(static_cast<size_t>(d), 0.0), k2(static_cast<size_t>(d), 0.0);
  for (int g = 0; g < G; ++g) {
    const int qh = kv_head * G + g;  // the query heads of the KV head's group
    for (const QueryRow& r : rows)
      for (int c = 0; c < d; ++c) {
        const double x = r.q[static_cast<size_t>(qh) * d + c];
        q2[c] += x * x / (static_cast<double>(rows.size()) * G);
      }
  }
  const size_t n = keys.size() / static_cast<size_t>(d);
  for (size_t t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) {
      const double x = keys[t * d + c];
      k2[c] += x * x / static_cast<double>(n);
    }
  std::vector<double> s(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) s[c] = q2[c] * k2[c];
  return s;
}

std::vector<int> think_pruned_channels(const std::vector<double>& scores, double ratio) {
  const int d = static_cast<int>(scores.size());
  const int n = static_cast<int>(std::floor(d * ratio));  // Python's int(head_dim * ratio)
  std::vector<int> idx(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) idx[c] = c;
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return scores[a] < scores[b]; });
  idx.resize(static_cast<size_t>(n));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace kvevict::reference
