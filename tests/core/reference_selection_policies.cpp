#include "reference_selection_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace kvevict::reference {
namespace {

// Indices 0..n-1 ranked by score desc, then position asc.
std::vector<int> ranked(const std::vector<double>& score, const std::vector<int32_t>& pos, std::vector<int> cands) {
  std::sort(cands.begin(), cands.end(), [&](int a, int b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return pos[a] < pos[b];
  });
  return cands;
}

double norm(const float* k, int d) {
  double s = 0;
  for (int c = 0; c < d; ++c) s += static_cast<double>(k[c]) * k[c];
  return std::sqrt(s);
}

CachedHead prompt_head(const HeadData& h) {
  CachedHead c;
  c.T = h.S;
  c.keys = h.keys;
  c.pos.resize(h.S);
  std::iota(c.pos.begin(), c.pos.end(), 0);
  return c;
}

std::vector<int> kept_positions(const std::vector<int32_t>& pos, const std::vector<int>& idx) {
  std::vector<int> out;
  for (int i : idx) out.push_back(pos[i]);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<double> knorm_scores(const CachedHead& c, int d) {
  std::vector<double> s(c.T);
  for (int t = 0; t < c.T; ++t) s[t] = -norm(&c.keys[static_cast<size_t>(t) * d], d);
  return s;
}

std::vector<int32_t> dms_keep(const CachedHead& c, const std::vector<double>& score, int cap, int window,
                              double threshold) {
  std::vector<int> newest(c.T);
  std::iota(newest.begin(), newest.end(), 0);
  std::sort(newest.begin(), newest.end(), [&](int a, int b) { return c.pos[a] > c.pos[b]; });
  std::vector<int> keep(newest.begin(), newest.begin() + std::min({window, c.T, cap}));
  std::vector<int> passing;
  for (size_t j = std::min<size_t>(window, c.T); j < newest.size(); ++j)
    if (score[newest[j]] >= threshold) passing.push_back(newest[j]);
  passing = ranked(score, c.pos, passing);
  const int room = std::max(0, cap - static_cast<int>(keep.size()));
  for (int j = 0; j < room && j < static_cast<int>(passing.size()); ++j) keep.push_back(passing[j]);
  std::vector<int32_t> out;
  for (int i : keep) out.push_back(c.pos[i]);
  std::sort(out.begin(), out.end());
  return out;
}

KeptSets dms_prefill(const PromptData& p, int cap, int window, double threshold) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (const HeadData& h : p[l]) {
      const CachedHead c = prompt_head(h);
      const auto kept = dms_keep(c, knorm_scores(c, h.d), cap, window, threshold);
      out[l].emplace_back(kept.begin(), kept.end());
    }
  return out;
}

KeptSets composed_snapkv_knorm(const PromptData& p, int budget, int kernel, double r1, double r2) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (const HeadData& h : p[l]) {
      const int S = h.S, W = h.W, n = S - W, r = kernel / 2;
      // SnapKVPress.score
      std::vector<double> score(S, 0.0);
      for (int g = 0; g < h.G; ++g) {
        std::vector<double> s(n, 0.0);
        for (int q = 0; q < W; ++q)
          for (int t = 0; t < n; ++t) s[t] += h.window_attention[(static_cast<size_t>(g) * W + q) * S + t] / W;
        for (int t = 0; t < n; ++t) {
          double pooled = 0;
          for (int k = -r; k <= r; ++k)
            if (t + k >= 0 && t + k < n) pooled += s[t + k];
          score[t] += pooled / kernel / h.G;
        }
      }
      double top = 0;
      for (int t = 0; t < n; ++t) top = std::max(top, score[t]);
      for (int t = n; t < S; ++t) score[t] = top + 1;  // the window, above every other token
      const CachedHead c = prompt_head(h);
      std::vector<int> all(S);
      std::iota(all.begin(), all.end(), 0);
      const int n1 = static_cast<int>(std::floor(S * (1 - r1)));
      std::vector<int> stage1 = ranked(score, c.pos, all);
      stage1.resize(n1);
      const int n2 = std::min(budget, static_cast<int>(std::floor(n1 * (1 - r2))));
      std::vector<int> stage2 = ranked(knorm_scores(c, h.d), c.pos, stage1);
      stage2.resize(n2);
      out[l].push_back(kept_positions(c.pos, stage2));
    }
  return out;
}

KeptSets knorm_model_wide(const PromptData& p, int budget, int recent) {
  struct Entry {
    double score;
    int pos, layer, head;
  };
  std::vector<Entry> pool;
  size_t free = 0;
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (size_t hh = 0; hh < p[l].size(); ++hh) {
      const HeadData& h = p[l][hh];
      const CachedHead c = prompt_head(h);
      const auto s = knorm_scores(c, h.d);
      std::vector<int> kept;
      for (int t = 0; t < h.S; ++t) {
        if (t >= h.S - recent) kept.push_back(t);
        else pool.push_back({s[t], t, static_cast<int>(l), static_cast<int>(hh)});
      }
      free += std::max(0, budget - recent);
      out[l].push_back(kept);
    }
  std::sort(pool.begin(), pool.end(), [](const Entry& a, const Entry& b) {
    return std::make_tuple(-a.score, a.pos, a.layer, a.head) < std::make_tuple(-b.score, b.pos, b.layer, b.head);
  });
  for (size_t j = 0; j < free && j < pool.size(); ++j) out[pool[j].layer][pool[j].head].push_back(pool[j].pos);
  for (auto& layer : out)
    for (auto& head : layer) std::sort(head.begin(), head.end());
  return out;
}

int mass_count(std::vector<double> score, double p) {
  std::vector<double> pos;
  double total = 0;
  for (double s : score)
    if (s > 0 && std::isfinite(s)) pos.push_back(s), total += s;
  std::sort(pos.rbegin(), pos.rend());
  double sum = 0;
  for (size_t k = 0; k < pos.size(); ++k) {
    sum += pos[k] / total;
    if (sum >= p) return static_cast<int>(k + 1);
  }
  return static_cast<int>(pos.size());
}

}  // namespace kvevict::reference
