#include "core/engine/selection.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "core/engine/budget_allocator.h"
#include "core/engine/counter_rng.h"

namespace kvevict {
namespace {

// Whether the positions increase strictly along the cache (the usual positional cache order): then
// ordering cache indices by position is ordering them by index, which needs no sort.
bool strictly_increasing(std::span<const int32_t> positions) {
  for (size_t i = 1; i < positions.size(); ++i)
    if (positions[i] <= positions[i - 1]) return false;
  return true;
}

// `kept` (distinct cache indices) in position order: by a mask in O(T) where the positions increase
// along the cache (`increasing`: strictly_increasing(positions)), else by a sort.
void order_kept(std::vector<int>& kept, std::span<const int32_t> positions, bool increasing) {
  if (!increasing) {
    std::sort(kept.begin(), kept.end(), [&](int a, int b) { return positions[a] < positions[b]; });
    return;
  }
  std::vector<char> in(positions.size(), 0);
  for (int i : kept) in[static_cast<size_t>(i)] = 1;
  size_t n = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i]) kept[n++] = static_cast<int>(i);
  if (n != kept.size()) throw std::logic_error("select: a kept list holds an index twice");
}

// protected_indices, told whether the positions increase along the cache (then no sort by position).
std::vector<int> protected_in_priority(std::span<const int32_t> positions, int protect_first, int protect_recent,
                                       bool increasing) {
  const int T = static_cast<int>(positions.size());
  std::vector<int> by_position(T);
  std::iota(by_position.begin(), by_position.end(), 0);
  if (!increasing)
    std::sort(by_position.begin(), by_position.end(), [&](int a, int b) { return positions[a] < positions[b]; });
  std::vector<char> taken(T, 0);
  std::vector<int> out;
  for (int i : by_position) {
    if (positions[i] >= protect_first) break;
    out.push_back(i);
    taken[i] = 1;
  }
  int recent = 0;
  for (int j = T - 1; j >= 0 && recent < protect_recent; --j, ++recent) {
    const int i = by_position[j];
    if (!taken[i]) {
      out.push_back(i);
      taken[i] = 1;
    }
  }
  return out;
}

}  // namespace

std::vector<int> protected_indices(std::span<const int32_t> positions, int protect_first, int protect_recent) {
  return protected_in_priority(positions, protect_first, protect_recent, strictly_increasing(positions));
}

std::vector<int> top_k_indices(std::span<const float> scores, std::span<const int32_t> positions,
                               std::vector<int> candidates, int k, bool ranked) {
  k = std::clamp(k, 0, static_cast<int>(candidates.size()));
  auto cmp = [&](int a, int b) { return ranks_before(scores[a], positions[a], scores[b], positions[b]); };
  if (ranked) {
    std::partial_sort(candidates.begin(), candidates.begin() + k, candidates.end(), cmp);
  } else if (k > 0 && k < static_cast<int>(candidates.size())) {  // the same set, by a partition
    std::nth_element(candidates.begin(), candidates.begin() + (k - 1), candidates.end(), cmp);
  }
  candidates.resize(k);
  return candidates;
}

std::vector<int> select_head(std::span<const float> scores, std::span<const int32_t> positions,
                             const HeadSelectionSpec& spec) {
  const int T = static_cast<int>(positions.size());
  if (static_cast<int>(scores.size()) != T) throw std::invalid_argument("select_head: scores/positions size mismatch");
  if (spec.random_share > 0 && !(spec.temperature > 0)) throw std::invalid_argument("select_head: temperature must be > 0");
  const int budget = std::max(0, spec.budget);
  const bool increasing = strictly_increasing(positions);  // the O(T) paths below, decided once
  std::vector<int> kept;
  if (budget >= T) {
    kept.resize(T);
    std::iota(kept.begin(), kept.end(), 0);
    // Cache order is position order where the positions increase: the list is already in order.
    if (!spec.score_order && !increasing) order_kept(kept, positions, increasing);
    return kept;
  }
  std::vector<int> prot = protected_in_priority(positions, spec.protect_first, spec.protect_recent, increasing);
  if (static_cast<int>(prot.size()) >= budget) {
    prot.resize(budget);
    order_kept(prot, positions, increasing);
    return prot;
  }
  std::vector<char> is_prot(T, 0);
  for (int i : prot) is_prot[i] = 1;
  std::vector<int> candidates;
  candidates.reserve(T);
  for (int i = 0; i < T; ++i)
    if (!is_prot[i]) candidates.push_back(i);
  const int free = budget - static_cast<int>(prot.size());
  const int n_random = std::clamp(static_cast<int>(std::floor(spec.random_share * free)), 0, free);
  const int n_top = free - n_random;

  // By rank where the kept order is the score's; else any order (sorted by position below).
  kept = top_k_indices(scores, positions, candidates, n_top, spec.score_order);
  if (n_random > 0) {
    std::vector<char> taken(T, 0);
    for (int i : kept) taken[i] = 1;
    std::vector<int> rest;
    std::vector<double> key(T, -INFINITY);
    for (int i : candidates) {
      if (taken[i]) continue;
      rest.push_back(i);
      const double u = counter_uniform(spec.seed, spec.layer, spec.kv_head, positions[i], 0);
      const double s = std::isnan(scores[i]) ? -INFINITY : static_cast<double>(scores[i]);
      key[i] = s / spec.temperature - std::log(-std::log(u));
    }
    auto cmp = [&](int a, int b) {
      if (key[a] != key[b]) return key[a] > key[b];
      return positions[a] < positions[b];
    };
    const int n = std::min<int>(n_random, static_cast<int>(rest.size()));
    std::partial_sort(rest.begin(), rest.begin() + n, rest.end(), cmp);
    kept.insert(kept.end(), rest.begin(), rest.begin() + n);
  }
  std::sort(prot.begin(), prot.end(), [&](int a, int b) { return positions[a] < positions[b]; });
  kept.insert(kept.end(), prot.begin(), prot.end());
  if (!spec.score_order) order_kept(kept, positions, increasing);
  return kept;
}

std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                    const std::vector<std::span<const int32_t>>& positions,
                                                    const std::vector<int>& budget, int protect_first,
                                                    int protect_recent, double floor_alpha, bool score_order) {
  const int H = static_cast<int>(scores.size());
  std::vector<std::vector<int>> prot(H), cand(H), kept(H);
  std::vector<int> free(H);
  struct Entry {
    float score;
    int32_t position;
    int head;
    int index;
  };
  std::vector<Entry> all;
  for (int h = 0; h < H; ++h) {
    const int T = static_cast<int>(positions[h].size());
    prot[h] = protected_indices(positions[h], protect_first, protect_recent);
    std::vector<char> is_prot(T, 0);
    for (int i : prot[h]) is_prot[i] = 1;
    for (int i = 0; i < T; ++i)
      if (!is_prot[i]) {
        cand[h].push_back(i);
        all.push_back({scores[h][i], positions[h][i], h, i});
      }
    if (budget[h] < static_cast<int>(prot[h].size())) prot[h].resize(std::max(0, budget[h]));
    free[h] = std::clamp(budget[h] - static_cast<int>(prot[h].size()), 0, static_cast<int>(cand[h].size()));
  }
  const int64_t total_free = std::accumulate(free.begin(), free.end(), int64_t{0});
  const int64_t k = std::min<int64_t>(total_free, static_cast<int64_t>(all.size()));
  std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const Entry& a, const Entry& b) {
    if (ranks_before(a.score, a.position, b.score, b.position)) return true;  // the tie rule, then the head
    if (ranks_before(b.score, b.position, a.score, a.position)) return false;
    return a.head < b.head;
  });
  std::vector<int64_t> counts(H, 0);
  for (int64_t j = 0; j < k; ++j) ++counts[all[j].head];
  std::vector<double> weight(H);
  std::vector<int64_t> cap(H);
  for (int h = 0; h < H; ++h) {
    weight[h] = static_cast<double>(counts[h]) * (1.0 - floor_alpha) + floor_alpha * free[h];
    cap[h] = static_cast<int64_t>(cand[h].size());
  }
  // The weights sum to total_free, so the proportional split reproduces them up to rounding.
  const std::vector<int64_t> share = allocate_budgets(weight, cap, total_free);
  for (int h = 0; h < H; ++h) {
    kept[h] = top_k_indices(scores[h], positions[h], cand[h], static_cast<int>(share[h]));
    std::sort(prot[h].begin(), prot[h].end(), [&](int a, int b) { return positions[h][a] < positions[h][b]; });
    kept[h].insert(kept[h].end(), prot[h].begin(), prot[h].end());
    if (!score_order)
      std::sort(kept[h].begin(), kept[h].end(), [&](int a, int b) { return positions[h][a] < positions[h][b]; });
  }
  return kept;
}

}  // namespace kvevict
