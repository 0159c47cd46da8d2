#include "reference_field_policies.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kvevict::reference {
namespace {

// Indices of `cands` ranked by score desc, then by key asc (original position); the first k.
std::vector<int> top(const std::vector<double>& score, const std::vector<int>& key, std::vector<int> cands, int k) {
  k = std::clamp(k, 0, static_cast<int>(cands.size()));
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return key[a] < key[b];
  });
  cands.resize(k);
  return cands;
}

std::vector<int> iota_vec(int a, int b) {
  std::vector<int> r;
  for (int i = a; i < b; ++i) r.push_back(i);
  return r;
}

// Prefill: cache slot = position. Keeps `protect` plus the top `budget - |protect|` of the rest.
std::vector<int> keep_prefill(const std::vector<double>& score, int S, int budget, const std::vector<int>& protect) {
  if (budget >= S) return iota_vec(0, S);
  std::vector<bool> is_protected(S, false);
  for (int i : protect) is_protected[i] = true;
  std::vector<int> cands;
  for (int i = 0; i < S; ++i)
    if (!is_protected[i]) cands.push_back(i);
  std::vector<int> kept = top(score, iota_vec(0, S), cands, budget - static_cast<int>(protect.size()));
  kept.insert(kept.end(), protect.begin(), protect.end());
  std::sort(kept.begin(), kept.end());
  return kept;
}

KeptSets per_head(const PromptData& p, const std::function<std::vector<int>(int, const HeadData&)>& f) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (const HeadData& h : p[l]) out[l].push_back(f(static_cast<int>(l), h));
  return out;
}

// kvpress ObservedAttentionPress: column sums over the S prompt queries / (S - t), group mean.
std::vector<double> observed_score(const HeadData& h) {
  std::vector<double> s(h.S, 0.0);
  for (int g = 0; g < h.G; ++g)
    for (int t = 0; t < h.S; ++t) s[t] += h.accumulated[static_cast<size_t>(g) * h.S + t] / (h.S - t) / h.G;
  return s;
}

double squared_norm(const std::vector<float>& rows, int t, int d) {
  double n = 0;
  for (int e = 0; e < d; ++e) n += static_cast<double>(rows[static_cast<size_t>(t) * d + e]) * rows[static_cast<size_t>(t) * d + e];
  return n;
}

// x divided by its sum over aligned blocks of `block` tokens from token 0 (the last one partial).
std::vector<double> block_normalised(const std::vector<double>& x, int block) {
  std::vector<double> y(x.size());
  for (size_t start = 0; start < x.size(); start += block) {
    const size_t end = std::min(x.size(), start + block);
    double sum = 0;
    for (size_t i = start; i < end; ++i) sum += x[i];
    for (size_t i = start; i < end; ++i) y[i] = x[i] / sum;
  }
  return y;
}

std::vector<int32_t> positions_of(const CachedHead& c, const std::vector<int>& slots) {
  std::vector<int32_t> out;
  for (int s : slots) out.push_back(c.pos[s]);
  std::sort(out.begin(), out.end());
  return out;
}

// One decision on a cached head: the `recent` newest slots and the slots at positions < sinks are
// protected; the top of the rest by score fill the budget.
std::vector<int32_t> keep_cached(const CachedHead& c, const std::vector<double>& score, int budget, int sinks, int recent) {
  if (c.T <= budget) return positions_of(c, iota_vec(0, c.T));
  std::vector<int> protect, cands;
  for (int s = 0; s < c.T; ++s) (c.pos[s] < sinks || s >= c.T - recent ? protect : cands).push_back(s);
  std::vector<int> key(c.pos.begin(), c.pos.end());
  std::vector<int> kept = top(score, key, cands, budget - static_cast<int>(protect.size()));
  kept.insert(kept.end(), protect.begin(), protect.end());
  return positions_of(c, kept);
}

}  // namespace

KeptSets observed_attention(const PromptData& p, int budget) {
  return per_head(p, [&](int, const HeadData& h) { return keep_prefill(observed_score(h), h.S, budget, {}); });
}

KeptSets keydiff(const PromptData& p, int budget, int sinks) {
  return per_head(p, [&](int, const HeadData& h) {
    std::vector<double> norm(h.S), anchor(h.d, 0.0), score(h.S);
    for (int t = 0; t < h.S; ++t) norm[t] = std::sqrt(squared_norm(h.keys, t, h.d));
    for (int t = 0; t < h.S; ++t)
      for (int e = 0; e < h.d; ++e) anchor[e] += h.keys[static_cast<size_t>(t) * h.d + e] / norm[t] / h.S;
    double anchor_norm = 0;
    for (double a : anchor) anchor_norm += a * a;
    anchor_norm = std::sqrt(anchor_norm);
    for (int t = 0; t < h.S; ++t) {
      double dot = 0;
      for (int e = 0; e < h.d; ++e) dot += h.keys[static_cast<size_t>(t) * h.d + e] * anchor[e];
      score[t] = -dot / (norm[t] * anchor_norm);
    }
    return keep_prefill(score, h.S, budget, iota_vec(0, std::min(sinks, h.S)));
  });
}

KeptSets cur(const PromptData& p, int budget, const CurParams& cp) {
  return per_head(p, [&](int, const HeadData& h) {
    // The norms rounded to float as the engine's key_norm / value_norm signals: a token repeated at
    // two positions has the same key norm up to RoPE rounding, and that tie must fall to the
    // position rule in both (as in reference::knorm).
    auto norm2 = [&](const std::vector<float>& rows, int t) {
      const double n = static_cast<float>(std::sqrt(squared_norm(rows, t, h.d)));
      return n * n;
    };
    std::vector<double> k2(h.S), v2(h.S);
    for (int t = 0; t < h.S; ++t) k2[t] = norm2(h.keys, t), v2[t] = norm2(h.values, t);
    if (cp.local) k2 = block_normalised(k2, cp.block), v2 = block_normalised(v2, cp.block);
    std::vector<double> s(h.S);
    for (int t = 0; t < h.S; ++t) {
      switch (cp.leverage) {
        case CurParams::Leverage::KvProduct: s[t] = k2[t] * v2[t]; break;
        case CurParams::Leverage::Key: s[t] = k2[t]; break;
        case CurParams::Leverage::Value: s[t] = v2[t]; break;
        case CurParams::Leverage::KvAvg: s[t] = (k2[t] + v2[t]) / 2; break;
      }
    }
    return keep_prefill(s, h.S, budget, iota_vec(0, std::min(cp.sinks, h.S)));
  });
}

std::vector<double> entropy_adaptive_keep_shares(const PromptData& p, double min_ratio, double max_ratio) {
  std::vector<double> shares;
  for (const auto& layer : p) {
    const int S = layer[0].S;
    // attentions.mean(dim=(batch, heads, queries)): every query head's causal row, averaged.
    std::vector<double> avg(S, 0.0);
    int rows = 0;
    for (const HeadData& h : layer)
      for (int g = 0; g < h.G; ++g, rows += S)
        for (int t = 0; t < S; ++t) avg[t] += h.accumulated[static_cast<size_t>(g) * S + t];
    double sum = 0;
    for (double& a : avg) sum += (a /= rows);
    double H = 0;
    for (double a : avg) {
      const double prob = a / (sum + 1e-8);
      H -= prob * std::log(prob + 1e-8);
    }
    const double normalised = H / std::log(std::max(S, 2));
    const double ratio = std::clamp(max_ratio - (max_ratio - min_ratio) * normalised, min_ratio, max_ratio);
    shares.push_back(1.0 - ratio);
  }
  return shares;
}

KeptSets entropy_adaptive(const PromptData& p, int budget, double min_ratio, double max_ratio) {
  CakeParams no_window;
  no_window.window = 0;
  const std::vector<int> b = cake_budgets(entropy_adaptive_keep_shares(p, min_ratio, max_ratio), p[0][0].S, budget, no_window);
  return per_head(p, [&](int l, const HeadData& h) { return keep_prefill(observed_score(h), h.S, b[l], {}); });
}

std::vector<std::vector<double>> attention(const CachedHead& c, const std::vector<QueryRow>& rows, int qh, int d) {
  std::vector<std::vector<double>> out;
  for (const QueryRow& r : rows) {
    std::vector<double> logit(c.T, -INFINITY);
    double mx = -INFINITY;
    for (int t = 0; t < c.T; ++t) {
      if (c.pos[t] > r.pos) continue;
      double dot = 0;
      for (int e = 0; e < d; ++e) dot += static_cast<double>(r.q[static_cast<size_t>(qh) * d + e]) * c.keys[static_cast<size_t>(t) * d + e];
      logit[t] = dot / std::sqrt(static_cast<double>(d));
      mx = std::max(mx, logit[t]);
    }
    double z = 0;
    for (double& v : logit) z += (v = std::isinf(v) ? 0.0 : std::exp(v - mx));
    for (double& v : logit) v /= z;
    out.push_back(std::move(logit));
  }
  return out;
}

std::vector<int32_t> morphkv_keep(const CachedHead& c, const std::vector<QueryRow>& rows, int kv_head, int G, int d,
                                  int budget, int window, bool max_over_rows) {
  const int n = c.T - window;  // entries older than the window (all precede every window query)
  const std::vector<QueryRow> last(rows.end() - window, rows.end());
  std::vector<double> score(c.T, 0.0);
  for (int r = 0; r < window; ++r) {
    // The code's GQA rule: the group's logits are summed, then softmax over the old entries.
    std::vector<double> logit(n, 0.0);
    for (int g = 0; g < G; ++g) {
      const int qh = kv_head * G + g;
      for (int t = 0; t < n; ++t) {
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += static_cast<double>(last[r].q[static_cast<size_t>(qh) * d + e]) * c.keys[static_cast<size_t>(t) * d + e];
        logit[t] += dot / std::sqrt(static_cast<double>(d));
      }
    }
    const double mx = *std::max_element(logit.begin(), logit.end());
    double z = 0;
    for (double& v : logit) z += (v = std::exp(v - mx));
    for (int t = 0; t < n; ++t) score[t] = max_over_rows ? std::max(score[t], logit[t] / z) : score[t] + logit[t] / z;
  }
  return keep_cached(c, score, budget, 0, window);
}

std::vector<int32_t> scissorhands_keep(const CachedHead& c, const std::vector<QueryRow>& rows, int kv_head, int G,
                                       int d, int budget, int window, int sinks, int recent, bool max_over_group) {
  const std::vector<QueryRow> last(rows.end() - window, rows.end());
  std::vector<double> score(c.T, max_over_group ? -INFINITY : 0.0);
  for (int g = 0; g < G; ++g) {
    const auto a = attention(c, last, kv_head * G + g, d);
    for (int t = 0; t < c.T; ++t) {
      double s = 0;
      for (const auto& row : a) s += row[t];
      score[t] = max_over_group ? std::max(score[t], s) : score[t] + s / G;
    }
  }
  return keep_cached(c, score, budget, sinks, recent);
}

std::vector<int32_t> knorm_keep(const CachedHead& c, int d, int budget) {
  std::vector<double> score(c.T);
  // Rounded to float as the engine's key_norm: a token repeated at two positions has the same norm
  // up to RoPE rounding, and such a tie must fall to the position rule in both.
  for (int t = 0; t < c.T; ++t) score[t] = -static_cast<double>(static_cast<float>(std::sqrt(squared_norm(c.keys, t, d))));
  return keep_cached(c, score, budget, 0, 0);
}

std::vector<int32_t> streaming_keep(const CachedHead& c, int budget, int sinks) {
  if (c.T <= budget) return positions_of(c, iota_vec(0, c.T));
  std::vector<int> kept;
  for (int s = 0; s < c.T; ++s)
    if (c.pos[s] < sinks) kept.push_back(s);
  for (int s = c.T - 1; static_cast<int>(kept.size()) < budget; --s)
    if (c.pos[s] >= sinks) kept.push_back(s);
  return positions_of(c, kept);
}

}  // namespace kvevict::reference
