#include "reference_table_policies.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace kvevict::reference {
namespace {

std::vector<int> range_of(int a, int b) {
  std::vector<int> r;
  for (int i = a; i < b; ++i) r.push_back(i);
  return r;
}

// The k best of `cands` by score (desc), then position (asc).
std::vector<int> best(const std::vector<double>& score, std::vector<int> cands, int k) {
  k = std::clamp(k, 0, static_cast<int>(cands.size()));
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
  cands.resize(k);
  return cands;
}

// Prefill (slot = position): `protect` plus the best budget - |protect| of the others, ascending.
std::vector<int> keep(const std::vector<double>& score, int S, int budget, const std::vector<int>& protect) {
  if (budget >= S) return range_of(0, S);
  std::vector<bool> is_protected(S, false);
  for (int i : protect) is_protected[i] = true;
  std::vector<int> cands;
  for (int i = 0; i < S; ++i)
    if (!is_protected[i]) cands.push_back(i);
  std::vector<int> kept = best(score, cands, budget - static_cast<int>(protect.size()));
  kept.insert(kept.end(), protect.begin(), protect.end());
  std::sort(kept.begin(), kept.end());
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  return kept;
}

std::vector<int> sinks_and_recent(int S, int sinks, int recent) {
  std::vector<int> p;
  for (int i = 0; i < S; ++i)
    if (i < sinks || i >= S - recent) p.push_back(i);
  return p;
}

// Stable ascending order of every table entry: entry (l, h) -> its rank.
std::vector<std::vector<int>> ranks(const Table& t) {
  std::vector<std::pair<int, int>> idx;
  for (size_t l = 0; l < t.size(); ++l)
    for (size_t h = 0; h < t[l].size(); ++h) idx.emplace_back(static_cast<int>(l), static_cast<int>(h));
  std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return t[a.first][a.second] < t[b.first][b.second]; });
  std::vector<std::vector<int>> r(t.size());
  for (size_t l = 0; l < t.size(); ++l) r[l].assign(t[l].size(), 0);
  for (size_t i = 0; i < idx.size(); ++i) r[idx[i].first][idx[i].second] = static_cast<int>(i);
  return r;
}

// Window attention of a head summed over its last `rows` rows: [G][S].
std::vector<double> window_sum(const HeadData& h, int rows) {
  std::vector<double> s(static_cast<size_t>(h.G) * h.S, 0.0);
  for (int g = 0; g < h.G; ++g)
    for (int q = h.W - rows; q < h.W; ++q)
      for (int t = 0; t < h.S; ++t)
        s[static_cast<size_t>(g) * h.S + t] += h.window_attention[(static_cast<size_t>(g) * h.W + q) * h.S + t];
  return s;
}

KeptSets each_head(const PromptData& p, const std::function<std::vector<int>(int, int, const HeadData&)>& f) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (size_t h = 0; h < p[l].size(); ++h) out[l].push_back(f(static_cast<int>(l), static_cast<int>(h), p[l][h]));
  return out;
}

}  // namespace

Table read_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  Table t;
  for (std::string line; std::getline(in, line);) {
    const size_t i = line.find_first_not_of(" \t\r");
    if (i == std::string::npos || line[i] == '#') continue;
    std::istringstream s(line);
    std::vector<double> row;
    for (double v; s >> v;) row.push_back(v);
    t.push_back(row);
  }
  return t;
}

std::vector<int> split_exact(const std::vector<double>& weight, const std::vector<int>& floor, int64_t total,
                             const std::vector<int>& cap) {
  const size_t n = weight.size();
  int64_t rest = total;
  for (int f : floor) rest -= f;
  const double wsum = std::accumulate(weight.begin(), weight.end(), 0.0);
  std::vector<int> out(n);
  std::vector<double> frac(n);
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double share = static_cast<double>(rest) * weight[i] / wsum;
    out[i] = floor[i] + static_cast<int>(std::floor(share));
    frac[i] = share - std::floor(share);
    given += static_cast<int64_t>(std::floor(share));
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return frac[a] > frac[b] + 1e-6; });
  for (int64_t k = 0; k < rest - given; ++k) ++out[order[static_cast<size_t>(k)]];
  for (size_t i = 0; i < n; ++i)
    if (out[i] > cap[i]) throw std::runtime_error("split_exact: a cap binds; choose another budget for the test");
  return out;
}

KeptSets full_or_streaming(const PromptData& p, const std::vector<std::vector<bool>>& full, int sinks, int recent) {
  return each_head(p, [&](int l, int h, const HeadData& d) {
    return full[l][h] ? range_of(0, d.S) : sinks_and_recent(d.S, sinks, recent);
  });
}

std::vector<std::vector<bool>> duo_full_heads(const Table& scores, double ratio) {
  size_t n = 0;
  for (const auto& r : scores) n += r.size();
  const int streaming = static_cast<int>(std::llround(ratio * static_cast<double>(n)));
  const auto r = ranks(scores);
  std::vector<std::vector<bool>> full(scores.size());
  for (size_t l = 0; l < scores.size(); ++l)
    for (size_t h = 0; h < scores[l].size(); ++h) full[l].push_back(r[l][h] >= streaming);
  return full;
}

std::vector<std::vector<bool>> rlkv_full_heads(const Table& gates, double share) {
  size_t n = 0;
  for (const auto& r : gates) n += r.size();
  const int n_full = static_cast<int>(std::llround(share * static_cast<double>(n)));
  const auto r = ranks(gates);
  std::vector<std::vector<bool>> full(gates.size());
  for (size_t l = 0; l < gates.size(); ++l)
    for (size_t h = 0; h < gates[l].size(); ++h) full[l].push_back(r[l][h] >= static_cast<int>(n) - n_full);
  return full;
}

KeptSets qfilter(const PromptData& p, const Table& filters, int budget) {
  return each_head(p, [&](int l, int h, const HeadData& d) {
    const std::vector<double>& f = filters.at(static_cast<size_t>(l) * p[l].size() + h);
    std::vector<double> s(d.S);
    for (int t = 0; t < d.S; ++t) {
      double dot = 0;
      for (int e = 0; e < d.d; ++e) dot += f[e] * d.keys[static_cast<size_t>(t) * d.d + e];
      s[t] = -dot;
    }
    return keep(s, d.S, budget, {});
  });
}

std::vector<int> per_layer_compression_budgets(const PromptData& p, const std::vector<double>& ratio, int budget) {
  const int L = static_cast<int>(p.size()), S = p[0][0].S;
  std::vector<double> w;
  for (double r : ratio) w.push_back(1.0 - r);
  return split_exact(w, std::vector<int>(L, 0), static_cast<int64_t>(budget) * L, std::vector<int>(L, S));
}

KeptSets per_layer_compression(const PromptData& p, const std::vector<double>& ratio, int budget) {
  const std::vector<int> b = per_layer_compression_budgets(p, ratio, budget);
  return each_head(p, [&](int l, int, const HeadData& d) {
    std::vector<double> s(d.S);
    for (int t = 0; t < d.S; ++t) {
      double q = 0;
      for (int e = 0; e < d.d; ++e) q += static_cast<double>(d.keys[static_cast<size_t>(t) * d.d + e]) * d.keys[static_cast<size_t>(t) * d.d + e];
      s[t] = -static_cast<double>(static_cast<float>(std::sqrt(q)));  // the engine's key_norm is a float
    }
    return keep(s, d.S, b[l], {});
  });
}

std::vector<std::vector<int>> head_budgets(const PromptData& p, const Table& head_weight, int budget, int prot) {
  const int L = static_cast<int>(p.size()), S = p[0][0].S;
  std::vector<double> lw(L, 0.0);
  for (int l = 0; l < L; ++l)
    for (double w : head_weight[l]) lw[l] += w;
  const std::vector<int> b = split_exact(lw, std::vector<int>(L, prot), static_cast<int64_t>(budget) * L, std::vector<int>(L, S));
  std::vector<std::vector<int>> out(L);
  for (int l = 0; l < L; ++l) {
    const int H = static_cast<int>(head_weight[l].size());
    out[l] = split_exact(head_weight[l], std::vector<int>(H, prot), static_cast<int64_t>(b[l]) * H, std::vector<int>(H, S));
  }
  return out;
}

Table headkv_weights(const Table& scores, double beta) {
  double sum = 0;
  size_t n = 0;
  for (const auto& r : scores)
    for (double v : r) sum += v, ++n;
  Table w = scores;
  for (auto& r : w)
    for (double& v : r) v = 1.0 / beta + v / sum * static_cast<double>(n) * (1.0 - 1.0 / beta);
  return w;
}

KeptSets headkv(const PromptData& p, const Table& scores, int budget, int window, int kernel, double beta) {
  const auto b = head_budgets(p, headkv_weights(scores, beta), budget, window);
  return each_head(p, [&](int l, int h, const HeadData& d) {
    const std::vector<double> a = window_sum(d, window);
    const int r = kernel / 2;
    std::vector<double> s(d.S, 0.0);
    for (int g = 0; g < d.G; ++g)
      for (int t = 0; t < d.S; ++t) {
        double m = -INFINITY;
        for (int k = -r; k <= r; ++k) {
          const int u = t + k;
          if (u < 0 || u >= d.S) continue;
          m = std::max(m, u < d.S - window ? a[static_cast<size_t>(g) * d.S + u] : 0.0);
        }
        s[t] += m / d.G;
      }
    return keep(s, d.S, b[l][h], range_of(d.S - window, d.S));
  });
}

}  // namespace kvevict::reference
