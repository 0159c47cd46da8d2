#include "reference_merge_methods.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace kvevict::reference {

std::vector<double> group_attention(const Rows& queries, const Rows& keys) {
  const size_t T = keys.size();
  std::vector<double> out(T, 0.0);
  for (const auto& q : queries) {
    std::vector<double> logit(T);
    for (size_t t = 0; t < T; ++t) {
      double s = 0;
      for (size_t c = 0; c < q.size(); ++c) s += q[c] * keys[t][c];
      logit[t] = s / std::sqrt(static_cast<double>(q.size()));
    }
    const double top = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (double& l : logit) z += (l = std::exp(l - top));
    for (size_t t = 0; t < T; ++t) out[t] += logit[t] / z / static_cast<double>(queries.size());
  }
  return out;
}

Rows cam_merge(const Rows& values, const std::vector<double>& attention, const std::vector<double>& scores,
               const std::vector<int>& kept, int new_tokens, int merge_budget, const std::function<double(int)>& uniform,
               int& candidates, int& merged) {
  const int T = static_cast<int>(values.size());
  std::vector<bool> is_kept(T, false);
  for (int j : kept) is_kept.at(j) = true;
  // 1. evicted indices ascending; kept indices ascending.
  std::vector<int> evict, keep(kept.begin(), kept.end());
  for (int t = 0; t < T; ++t)
    if (!is_kept[t]) evict.push_back(t);
  std::sort(keep.begin(), keep.end());
  Rows out = values;
  if (evict.empty() || keep.empty()) return out;
  // 2. merge candidates: the evicted flipped (later first), a stable sort by descending score, the
  //    first new_tokens of them, back in ascending order.
  std::vector<int> order(evict.rbegin(), evict.rend());
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(new_tokens)));
  std::sort(order.begin(), order.end());
  const int K = static_cast<int>(keep.size());
  for (int e : order) {
    ++candidates;
    // 3. the window: the merge_budget kept indices after e (searchsorted right), clipped at K.
    const int start = static_cast<int>(std::upper_bound(keep.begin(), keep.end(), e) - keep.begin());
    std::vector<int> window;
    for (int o = 0; o < merge_budget; ++o)
      if (start + o < K) window.push_back(keep[start + o]);
    const int actual = static_cast<int>(window.size());
    if (actual == 0) continue;  // scale 0: nothing to scatter
    // 4. the probability: A_e over the window's mean attention, NaN -> 0, inf -> 1, clamped.
    double mean = 0;
    for (int j : window) mean += attention[j];
    mean /= actual;
    double p = attention[e] / mean;
    if (std::isnan(p)) p = 0;
    if (std::isinf(p)) p = 1;
    p = std::clamp(p, 0.0, 1.0);
    // 5. Bernoulli; 6. scatter-add v_e / actual into every window target.
    if (!(uniform(e) < p)) continue;
    ++merged;
    for (int j : window)
      for (size_t c = 0; c < out[j].size(); ++c) out[j][c] += values[e][c] / actual;
  }
  return out;
}

std::vector<double> cam_knorm_scores(const std::vector<Rows>& keys) {
  const size_t T = keys.at(0).size();
  // In float, as the key_norm signal (rounded norms, as reference_policies.cpp's knorm) and the
  // layer-shared mean (a float sum of score / H) are: the same token at two positions has the
  // same norm up to RoPE rounding, and scores that close must rank as the engine ranks them.
  std::vector<float> score(T, 0.0f);
  for (const Rows& head : keys)
    for (size_t t = 0; t < T; ++t) {
      double n = 0;
      for (double x : head[t]) n += x * x;
      score[t] += -static_cast<float>(std::sqrt(n)) / static_cast<float>(keys.size());
    }
  return std::vector<double>(score.begin(), score.end());
}

std::vector<int> cam_knorm_kept(const std::vector<Rows>& keys, int target_size) {
  const std::vector<double> score = cam_knorm_scores(keys);
  std::vector<int> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  // Higher score first, ties to the earlier entry (the engine's documented rule; torch.topk leaves
  // the order of ties unspecified).
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return score[a] > score[b]; });
  idx.resize(std::min(idx.size(), static_cast<size_t>(target_size)));
  std::sort(idx.begin(), idx.end());
  return idx;
}

namespace {

double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t c = 0; c < a.size(); ++c) ab += a[c] * b[c], aa += a[c] * a[c], bb += b[c] * b[c];
  return ab / (std::max(std::sqrt(aa), 1e-6) * std::max(std::sqrt(bb), 1e-6));
}

}  // namespace

std::vector<HeadRows> d2o_merge(const std::vector<HeadRows>& heads, const std::vector<std::vector<int>>& kept, double alpha,
                                double beta, std::optional<double>& tau, int& merged) {
  // best[h][e] = (position in kept, cosine) of every evicted entry
  std::vector<std::vector<std::pair<int, double>>> best(heads.size());
  std::vector<std::vector<int>> evicted(heads.size());
  double sum = 0;
  size_t n = 0;
  for (size_t h = 0; h < heads.size(); ++h) {
    std::vector<bool> is_kept(heads[h].keys.size(), false);
    for (int j : kept[h]) is_kept.at(j) = true;
    for (size_t e = 0; e < is_kept.size(); ++e) {
      if (is_kept[e] || kept[h].empty()) continue;
      int arg = 0;
      double top = cosine(heads[h].keys[e], heads[h].keys[kept[h][0]]);
      for (size_t j = 1; j < kept[h].size(); ++j) {
        const double c = cosine(heads[h].keys[e], heads[h].keys[kept[h][j]]);
        if (c > top) top = c, arg = static_cast<int>(j);
      }
      evicted[h].push_back(static_cast<int>(e));
      best[h].push_back({arg, top});
      sum += top;
      ++n;
    }
  }
  if (n > 0) tau = tau ? alpha * *tau + beta * (sum / n) : sum / n;
  std::vector<HeadRows> out(heads.size());
  for (size_t h = 0; h < heads.size(); ++h)
    for (size_t j = 0; j < kept[h].size(); ++j) {
      std::vector<double> k = heads[h].keys[kept[h][j]], v = heads[h].values[kept[h][j]];
      int count = 0;
      for (size_t i = 0; i < evicted[h].size(); ++i) {
        if (best[h][i].first != static_cast<int>(j) || !(best[h][i].second >= *tau)) continue;
        ++count;
        const double s = best[h][i].second;
        for (size_t c = 0; c < k.size(); ++c) {
          k[c] += s * heads[h].keys[evicted[h][i]][c];
          v[c] += s * heads[h].values[evicted[h][i]][c];
        }
      }
      merged += count;
      for (size_t c = 0; c < k.size(); ++c) k[c] /= 1 + count, v[c] /= 1 + count;
      out[h].keys.push_back(std::move(k));
      out[h].values.push_back(std::move(v));
    }
  return out;
}

std::vector<int> h2o_with_sinks(const std::vector<double>& accumulated, int budget, int sinks, int recent) {
  const int S = static_cast<int>(accumulated.size());
  if (budget >= S) {
    std::vector<int> all(S);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  std::vector<int> out, middle;
  for (int t = 0; t < S; ++t) (t < sinks || t >= S - recent ? out : middle).push_back(t);
  std::stable_sort(middle.begin(), middle.end(), [&](int a, int b) { return accumulated[a] > accumulated[b]; });
  const int rest = std::max(0, budget - static_cast<int>(out.size()));
  out.insert(out.end(), middle.begin(), middle.begin() + std::min<size_t>(middle.size(), rest));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kvevict::reference
