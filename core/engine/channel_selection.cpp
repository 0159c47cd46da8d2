#include "core/engine/channel_selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "core/decode/kv_cache.h"

namespace kvevict {

int pruned_channel_count(int head_dim, double prune) {
  if (head_dim <= 0 || !(prune > 0)) return 0;
  // int(head_dim * ratio) in Python truncates the double product, as floor does for >= 0.
  const double n = std::floor(static_cast<double>(head_dim) * prune);
  return n >= head_dim ? head_dim : static_cast<int>(n);
}

std::vector<int> select_pruned_channels(std::span<const float> scores, int n) {
  const int d = static_cast<int>(scores.size());
  n = std::clamp(n, 0, d);
  std::vector<int> order(static_cast<size_t>(d));
  std::iota(order.begin(), order.end(), 0);
  // Lower first; NaN below every number; ties (and NaNs) by channel index: a strict weak order.
  auto lower = [&](int a, int b) {
    const float x = scores[static_cast<size_t>(a)], y = scores[static_cast<size_t>(b)];
    const bool xn = std::isnan(x), yn = std::isnan(y);
    if (xn != yn) return xn;
    if (!xn && x != y) return x < y;
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + n, order.end(), lower);
  order.resize(static_cast<size_t>(n));
  std::sort(order.begin(), order.end());
  return order;
}

void zero_key_channels(KVCache& cache, int layer, int head, std::span<const int> channels) {
  const int d = cache.head_dim();
  for (int c : channels)
    if (c < 0 || c >= d) throw std::invalid_argument("zero_key_channels: channel " + std::to_string(c) + " out of range");
  if (channels.empty()) return;
  if (cache.is_codebook(layer, head)) throw std::logic_error("zero_key_channels: a codebook head has no dense keys");
  const int T = cache.length(layer, head);
  std::vector<float> key(static_cast<size_t>(d));
  for (int t = 0; t < T; ++t) {
    cache.reconstruct_keys(layer, head, t, t + 1, key.data());
    for (int c : channels) key[static_cast<size_t>(c)] = 0.0f;
    cache.write_entry(layer, head, t, key.data(), nullptr);  // 0 is exact in every KvType
  }
}

std::vector<int> prune_head_channels(const PolicyProgram& policy, const ScoreInputs& in, KVCache& cache) {
  if (in.head_dim != cache.head_dim()) throw std::logic_error("prune_head_channels: head_dim differs from the cache's");
  std::vector<float> scores(static_cast<size_t>(in.head_dim), 0.0f);
  policy.channel_score(in, scores.data());
  const std::vector<int> pruned =
      select_pruned_channels(scores, pruned_channel_count(in.head_dim, policy.description().channels.prune));
  zero_key_channels(cache, in.layer, in.kv_head, pruned);
  return pruned;
}

}  // namespace kvevict
