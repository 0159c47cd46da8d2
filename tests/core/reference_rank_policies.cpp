#include "reference_rank_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace kvevict::reference {

double group_out_norm_l1(const Model& model, int layer, int kv_head, int G, const float* v) {
  const ModelConfig& c = model.config;
  const std::vector<float>& wo = model.weights.layers[layer].wo;
  double total = 0;
  for (int g = 0; g < G; ++g) {
    const int h = kv_head * G + g;
    double l1 = 0;
    for (int r = 0; r < c.dim; ++r) {
      double x = 0;
      for (int a = 0; a < c.head_dim; ++a) x += static_cast<double>(wo[static_cast<size_t>(r) * c.q_dim() + h * c.head_dim + a]) * v[a];
      l1 += std::fabs(x);
    }
    total += l1;
  }
  return total / G;
}

namespace {

double at(const HeadData& h, int g, int w, int t) { return h.window_attention[(static_cast<size_t>(g) * h.W + w) * h.S + t]; }

// (lifted, key): lifted entries first, each group by key descending.
struct Ranked {
  bool lifted = false;
  double key = 0;
};

std::vector<Ranked> defensive_scores(const HeadData& h, const Model& model, int layer, int kv_head, int window, int kernel,
                                     double threshold) {
  const int n = h.S - window, r = kernel / 2, w0 = h.W - window;
  std::vector<double> m(n, -INFINITY);
  for (int g = 0; g < h.G; ++g)
    for (int w = w0; w < h.W; ++w) {
      double base = 0;
      for (int t = 0; t < n; ++t) base += at(h, g, w, t);
      std::vector<double> pooled(n, 0.0);
      double pooled_sum = 0;
      for (int t = 0; t < n; ++t) {
        for (int k = -r; k <= r; ++k)
          if (t + k >= 0 && t + k < n) pooled[t] += at(h, g, w, t + k);
        pooled[t] /= kernel;  // avg_pool1d: the zero padding counts
        pooled_sum += pooled[t];
      }
      for (int t = 0; t < n; ++t) m[t] = std::max(m[t], pooled[t] / pooled_sum * base);
    }
  const double floor_m = std::accumulate(m.begin(), m.end(), 0.0) / n;
  std::vector<double> u(n, 0.0);
  double bias = 0, total = 0;
  for (int g = 0; g < h.G; ++g)
    for (int w = w0; w < h.W; ++w) {
      for (int t = 0; t < n; ++t) u[t] += at(h, g, w, t);
      for (int t = std::max(0, n - window); t < n; ++t) bias += at(h, g, w, t);
    }
  const double rows = static_cast<double>(h.G) * window;
  bias /= rows;
  for (double& x : u) total += (x /= rows);
  for (double& x : u) x /= total;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return u[a] > u[b]; });
  std::vector<Ranked> out(n);
  double mass = 0;
  for (int t : order) {
    mass += u[t];
    out[t].lifted = mass < threshold - bias;
  }
  for (int t = 0; t < n; ++t)
    out[t].key = out[t].lifted ? u[t]
                               : std::max(m[t], floor_m) *
                                     group_out_norm_l1(model, layer, kv_head, h.G, h.values.data() + static_cast<size_t>(t) * h.d);
  return out;
}

}  // namespace

KeptSets defensive_kv(const PromptData& p, const Model& model, int budget, int window, int kernel, double threshold) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l) {
    const int H = static_cast<int>(p[l].size()), S = p[l][0].S, n = S - window;
    std::vector<std::vector<Ranked>> s(H);
    std::vector<std::pair<int, int>> all;  // (head, position)
    for (int h = 0; h < H; ++h) {
      s[h] = defensive_scores(p[l][h], model, static_cast<int>(l), h, window, kernel, threshold);
      for (int t = 0; t < n; ++t) all.push_back({h, t});
    }
    std::stable_sort(all.begin(), all.end(), [&](auto a, auto b) {
      const Ranked &x = s[a.first][a.second], &y = s[b.first][b.second];
      if (x.lifted != y.lifted) return x.lifted;
      if (x.key != y.key) return x.key > y.key;
      if (a.second != b.second) return a.second < b.second;
      return a.first < b.first;
    });
    const int pool = std::min(static_cast<int>(all.size()), H * std::max(0, budget - window));
    std::vector<std::vector<int>> kept(H);
    for (int j = 0; j < pool; ++j) kept[all[j].first].push_back(all[j].second);
    for (int h = 0; h < H; ++h) {
      for (int t = n; t < S; ++t) kept[h].push_back(t);
      std::sort(kept[h].begin(), kept[h].end());
      out[l].push_back(budget >= S ? [&] { std::vector<int> a(S); std::iota(a.begin(), a.end(), 0); return a; }() : kept[h]);
    }
  }
  return out;
}

KeptSets out_norm_l1_topk(const PromptData& p, const Model& model, int budget) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (size_t kv = 0; kv < p[l].size(); ++kv) {
      const HeadData& h = p[l][kv];
      std::vector<double> s(h.S);
      for (int t = 0; t < h.S; ++t)
        s[t] = group_out_norm_l1(model, static_cast<int>(l), static_cast<int>(kv), h.G, h.values.data() + static_cast<size_t>(t) * h.d);
      std::vector<int> order(h.S);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a] > s[b]; });
      order.resize(std::min(budget, h.S));
      std::sort(order.begin(), order.end());
      out[l].push_back(order);
    }
  return out;
}

}  // namespace kvevict::reference
