#include "reference_policies.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/decode/decoder.h"
#include "core/engine/counter_rng.h"
#include "core/engine/engine.h"

namespace kvevict::reference {
namespace {

// Top-k of (score, position) over `cands`: score desc, position asc.
std::vector<int> top(const std::vector<double>& score, std::vector<int> cands, int k) {
  k = std::clamp(k, 0, static_cast<int>(cands.size()));
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  cands.resize(k);
  return cands;
}

std::vector<int> range(int a, int b) {
  std::vector<int> r;
  for (int i = a; i < b; ++i) r.push_back(i);
  return r;
}

std::vector<int> sorted_union(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

double wa(const HeadData& h, int g, int w, int n) { return h.window_attention[(static_cast<size_t>(g) * h.W + w) * h.S + n]; }

// 1-D pooling, stride 1, same padding; avg counts zero padding, max ignores it.
std::vector<double> pool(const std::vector<double>& x, int kernel, bool max_pool) {
  const int n = static_cast<int>(x.size()), r = kernel / 2;
  std::vector<double> y(n);
  for (int i = 0; i < n; ++i) {
    double acc = max_pool ? -INFINITY : 0.0;
    for (int j = i - r; j <= i + r; ++j) {
      if (j < 0 || j >= n) continue;
      acc = max_pool ? std::max(acc, x[j]) : acc + x[j];
    }
    y[i] = max_pool ? acc : acc / kernel;
  }
  return y;
}

// SnapKV's per-KV-head score over the non-window keys: window sum, pooled, group mean.
std::vector<double> snap_score(const HeadData& h, const SnapParams& sp, bool mean_rows) {
  const int n = h.S - sp.window;
  std::vector<double> out(n, 0.0);
  for (int g = 0; g < h.G; ++g) {
    std::vector<double> s(n, 0.0);
    for (int w = h.W - sp.window; w < h.W; ++w)
      for (int i = 0; i < n; ++i) s[i] += wa(h, g, w, i);
    if (mean_rows)
      for (double& v : s) v /= sp.window;
    s = pool(s, sp.kernel, sp.max_pool);
    for (int i = 0; i < n; ++i) out[i] += s[i] / h.G;
  }
  return out;
}

KeptSets per_head(const PromptData& p, const std::function<std::vector<int>(int, int, const HeadData&)>& f) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l)
    for (size_t h = 0; h < p[l].size(); ++h) out[l].push_back(f(static_cast<int>(l), static_cast<int>(h), p[l][h]));
  return out;
}

}  // namespace

PromptData collect(const Model& model, const std::vector<int>& tokens, int window, bool causal_window) {
  const ModelConfig& c = model.config;
  const int S = static_cast<int>(tokens.size());
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder rec(S, false);
  decoder->forward(std::span<const int>(tokens), &rec);
  const KVCache& cache = decoder->cache();
  const int G = c.group_size(), d = c.head_dim, Hq = c.n_heads;
  PromptData p(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::vector<float>& q = rec.layers()[l].window_queries;  // [S][Hq][d]
    for (int kv = 0; kv < c.n_kv_heads; ++kv) {
      HeadData h;
      h.S = S;
      h.G = G;
      h.W = window;
      h.d = d;
      h.keys.assign(cache.keys(l, kv), cache.keys(l, kv) + static_cast<size_t>(S) * d);
      h.values.assign(cache.values(l, kv), cache.values(l, kv) + static_cast<size_t>(S) * d);
      h.window_attention.assign(static_cast<size_t>(G) * window * S, 0.0);
      h.accumulated.assign(static_cast<size_t>(G) * S, 0.0);
      // softmax over keys 0..n-1 of query row i of query head qh
      auto attention = [&](int qh, int i, int n) {
        std::vector<double> a(n);
        double mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += static_cast<double>(q[(static_cast<size_t>(i) * Hq + qh) * d + e]) * h.keys[static_cast<size_t>(j) * d + e];
          a[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, a[j]);
        }
        double z = 0;
        for (double& v : a) z += (v = std::exp(v - mx));
        for (double& v : a) v /= z;
        return a;
      };
      for (int g = 0; g < G; ++g) {
        const int qh = kv * G + g;
        for (int i = 0; i < S; ++i) {  // query at position i sees keys 0..i
          const int w = i - (S - window);
          const std::vector<double> a = attention(qh, i, i + 1);
          for (int j = 0; j <= i; ++j) h.accumulated[static_cast<size_t>(g) * S + j] += a[j];
          // A non-causal window row sees every key of the prompt (NACL's proxy rows).
          const std::vector<double> row = w < 0 ? std::vector<double>() : causal_window ? a : attention(qh, i, S);
          std::copy(row.begin(), row.end(), h.window_attention.begin() + (static_cast<size_t>(g) * window + w) * S);
        }
      }
      p[l].push_back(std::move(h));
    }
  }
  return p;
}

KeptSets full(const PromptData& p) {
  return per_head(p, [](int, int, const HeadData& h) { return range(0, h.S); });
}

// The DSL's random[t]: Philox4x32-10 on score stream 1, counter (position, kv_head, layer, stream),
// key = the seed's two 32-bit halves (docs/DSL.md §7). Its known-answer vectors are tested separately.
float philox_score_uniform(uint64_t seed, int layer, int kv_head, int position) {
  return counter_uniform(seed, layer, kv_head, position, kScoreStream);
}

KeptSets random_policy(const PromptData& p, int budget, uint64_t seed, UniformFn uniform) {
  return per_head(p, [&](int l, int kv, const HeadData& h) {
    std::vector<double> s(h.S);
    for (int n = 0; n < h.S; ++n) s[n] = uniform(seed, l, kv, n);
    auto k = top(s, range(0, h.S), budget);
    std::sort(k.begin(), k.end());
    return k;
  });
}

KeptSets streamingllm(const PromptData& p, int budget, int n_sink) {
  return per_head(p, [&](int, int, const HeadData& h) {
    if (budget >= h.S) return range(0, h.S);
    const int sinks = std::min(n_sink, budget);
    return sorted_union(range(0, sinks), range(h.S - (budget - sinks), h.S));
  });
}

KeptSets h2o_one_shot(const PromptData& p, int budget, int recent) {
  return per_head(p, [&](int, int, const HeadData& h) {
    if (budget >= h.S) return range(0, h.S);
    std::vector<double> s(h.S, 0.0);
    for (int g = 0; g < h.G; ++g)
      for (int n = 0; n < h.S; ++n) s[n] += h.accumulated[static_cast<size_t>(g) * h.S + n] / h.G;
    const int r = std::min(recent, budget);
    return sorted_union(top(s, range(0, h.S - r), budget - r), range(h.S - r, h.S));
  });
}

KeptSets tova(const PromptData& p, int budget) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l) {
    const int S = p[l][0].S;
    std::vector<double> s(S, 0.0);
    int heads = 0;
    for (const HeadData& h : p[l])
      for (int g = 0; g < h.G; ++g, ++heads)
        for (int n = 0; n < S; ++n) s[n] += wa(h, g, h.W - 1, n);
    for (double& v : s) v /= heads;
    auto k = top(s, range(0, S), budget);
    std::sort(k.begin(), k.end());
    out[l].assign(p[l].size(), k);
  }
  return out;
}

KeptSets snapkv(const PromptData& p, int budget, const SnapParams& sp) {
  return per_head(p, [&](int, int, const HeadData& h) {
    if (budget >= h.S) return range(0, h.S);
    const auto s = snap_score(h, sp, false);
    return sorted_union(top(s, range(0, h.S - sp.window), budget - sp.window), range(h.S - sp.window, h.S));
  });
}

std::vector<int> pyramid_layer_budgets(int L, int S, int budget, int window, int beta) {
  const int base = budget - window;
  int mn = base / beta;
  int mx = 2 * base - mn;
  if (mx >= S - window) {
    mx = S - window;
    mn = 2 * base - mx;
  }
  std::vector<int> out(L);
  for (int l = 0; l < L; ++l) out[l] = mx - l * ((mx - mn) / (L - 1));
  return out;
}

KeptSets pyramidkv(const PromptData& p, int budget, const SnapParams& sp, int beta) {
  const auto b = pyramid_layer_budgets(static_cast<int>(p.size()), p[0][0].S, budget, sp.window, beta);
  return per_head(p, [&](int l, int, const HeadData& h) {
    const auto s = snap_score(h, sp, false);
    return sorted_union(top(s, range(0, h.S - sp.window), b[l]), range(h.S - sp.window, h.S));
  });
}

KeptSets adakv(const PromptData& p, int budget, const SnapParams& sp, double alpha) {
  KeptSets out(p.size());
  for (size_t l = 0; l < p.size(); ++l) {
    const int H = static_cast<int>(p[l].size()), S = p[l][0].S, n = S - sp.window, B = budget - sp.window;
    std::vector<std::vector<double>> s(H);
    std::vector<std::pair<int, int>> all;  // (head, position)
    for (int h = 0; h < H; ++h) {
      s[h] = snap_score(p[l][h], sp, true);
      for (int i = 0; i < n; ++i) all.push_back({h, i});
    }
    std::stable_sort(all.begin(), all.end(), [&](auto a, auto b) {
      const double sa = s[a.first][a.second], sb = s[b.first][b.second];
      if (sa != sb) return sa > sb;
      if (a.second != b.second) return a.second < b.second;
      return a.first < b.first;
    });
    std::vector<int> count(H, 0);
    for (int j = 0; j < H * B; ++j) ++count[all[j].first];
    // Computed from the counts in one expression: accumulating (1 - alpha) once per token lets
    // float noise decide between fractional parts that are mathematically equal.
    std::vector<double> want(H);
    for (int h = 0; h < H; ++h) want[h] = alpha * B + (1.0 - alpha) * count[h];
    // Round to the exact total H*B: floors, then the largest fractional parts; fractional parts
    // equal up to 1e-9 are ties, and ties go to the lower head.
    std::vector<int> nh(H);
    int sum = 0;
    for (int h = 0; h < H; ++h) sum += (nh[h] = static_cast<int>(std::floor(want[h] + 1e-9)));
    std::vector<int> order = range(0, H);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const double fa = want[a] - nh[a], fb = want[b] - nh[b];
      return fa > fb + 1e-9;
    });
    for (int i = 0; sum < H * B; ++i, ++sum) ++nh[order[i % H]];
    for (int h = 0; h < H; ++h)
      out[l].push_back(sorted_union(top(s[h], range(0, n), nh[h]), range(n, S)));
  }
  return out;
}

KeptSets knorm(const PromptData& p, int budget) {
  return per_head(p, [&](int, int, const HeadData& h) {
    std::vector<double> s(h.S);
    for (int n = 0; n < h.S; ++n) {
      double q = 0;
      for (int e = 0; e < h.d; ++e) q += static_cast<double>(h.keys[static_cast<size_t>(n) * h.d + e]) * h.keys[static_cast<size_t>(n) * h.d + e];
      // Rounded to float like the engine's key_norm signal: the same token at two positions has the
      // same norm up to RoPE rounding, and a real tie must fall to the position rule in both.
      s[n] = -static_cast<double>(static_cast<float>(std::sqrt(q)));
    }
    auto k = top(s, range(0, h.S), budget);
    std::sort(k.begin(), k.end());
    return k;
  });
}

std::vector<double> cake_preferences(const PromptData& p, const CakeParams& cp) {
  std::vector<double> pref;
  for (const auto& layer : p) {
    double H = 0, V = 0;
    for (const HeadData& h : layer) {
      const int n = h.S - cp.window, w0 = h.W - cp.window;
      for (int g = 0; g < h.G; ++g) {
        std::vector<double> row_sum(h.W, 1.0);  // renormalise_rows: mass of each row on non-window keys
        if (cp.renormalise_rows)
          for (int w = w0; w < h.W; ++w) {
            row_sum[w] = 0;
            for (int i = 0; i < n; ++i) row_sum[w] += wa(h, g, w, i);
          }
        auto at = [&](int w, int i) { return wa(h, g, w, i) / row_sum[w]; };
        for (int i = 0; i < n; ++i) {
          double mean = 0;
          for (int w = w0; w < h.W; ++w) {
            const double a = at(w, i);
            H -= a * std::log(a + 1e-10);
            mean += a / cp.window;
          }
          double var = 0;
          for (int w = w0; w < h.W; ++w) var += (at(w, i) - mean) * (at(w, i) - mean);
          V += var / (cp.window - 1);
        }
      }
    }
    pref.push_back(std::pow(H, 1.0 / cp.tau1) * std::pow(V, 1.0 / cp.tau2));
  }
  return pref;
}

std::vector<std::vector<double>> cake_indicator(const HeadData& h, const CakeParams& cp) {
  const int n = h.S - cp.window, w0 = h.W - cp.window;
  std::vector<std::vector<double>> out;
  for (int g = 0; g < h.G; ++g) {
    std::vector<double> I(n);
    for (int i = 0; i < n; ++i) {
      double mean = 0, var = 0;
      for (int w = w0; w < h.W; ++w) mean += wa(h, g, w, i) / cp.window;
      for (int w = w0; w < h.W; ++w) var += (wa(h, g, w, i) - mean) * (wa(h, g, w, i) - mean);
      I[i] = mean + cp.gamma * var / (cp.window - 1);
    }
    out.push_back(cake_pool(I, cp));
  }
  return out;
}

std::vector<double> cake_pool(const std::vector<double>& x, const CakeParams& cp) {
  if (cp.pool == CakeParams::Pool::None) return x;
  return pool(x, cp.kernel, cp.pool == CakeParams::Pool::Max);
}

std::vector<int> cake_budgets(const std::vector<double>& pref, int S, int budget, const CakeParams& cp) {
  const int L = static_cast<int>(pref.size()), cap = S - cp.window;
  const long total = static_cast<long>(budget - cp.window) * L;
  const double psum = std::accumulate(pref.begin(), pref.end(), 0.0);
  std::vector<double> exact(L);
  for (int l = 0; l < L; ++l) exact[l] = pref[l] / psum * total;
  std::vector<int> b(L);
  if (cp.code_rounding) {  // truncate, clamp, spread the clamped excess evenly, fix the sum from layer 0
    long excess = 0;
    std::vector<bool> clamped(L, false);
    for (int l = 0; l < L; ++l) {
      b[l] = static_cast<int>(exact[l]);
      if (b[l] > cap) excess += b[l] - cap, b[l] = cap, clamped[l] = true;
    }
    const int free_layers = static_cast<int>(std::count(clamped.begin(), clamped.end(), false));
    for (int l = 0; l < L && free_layers > 0; ++l)
      if (!clamped[l]) b[l] = std::min(cap, b[l] + static_cast<int>(excess / free_layers));
    long sum = std::accumulate(b.begin(), b.end(), 0L);
    for (int l = 0; sum < total && l < L * cap; ++l)
      if (b[l % L] < cap) ++b[l % L], ++sum;
    return b;
  }
  // Largest remainder with caps (iterative water filling), ties to the lower layer.
  std::vector<bool> fixed(L, false);
  long left = total;
  for (bool again = true; again;) {
    again = false;
    double wsum = 0;
    for (int l = 0; l < L; ++l) if (!fixed[l]) wsum += pref[l];
    for (int l = 0; l < L; ++l)
      if (!fixed[l] && pref[l] / wsum * left >= cap) fixed[l] = true, b[l] = cap, left -= cap, again = true;
    if (!again)
      for (int l = 0; l < L; ++l) if (!fixed[l]) exact[l] = pref[l] / wsum * left;
  }
  long sum = 0;
  for (int l = 0; l < L; ++l) if (!fixed[l]) sum += (b[l] = static_cast<int>(std::floor(exact[l])));
  std::vector<int> order;
  for (int l = 0; l < L; ++l) if (!fixed[l]) order.push_back(l);
  std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return exact[a] - b[a] > exact[c] - b[c]; });
  for (size_t i = 0; sum < left && !order.empty(); ++i, ++sum) ++b[order[i % order.size()]];
  return b;
}

KeptSets cake(const PromptData& p, int budget, const CakeParams& cp) {
  const int S = p[0][0].S;
  if (S <= budget + cp.window) return full(p);  // §2.5 skip rule
  const auto b = cake_budgets(cake_preferences(p, cp), S, budget, cp);
  return per_head(p, [&](int l, int, const HeadData& h) {
    const auto per_q = cake_indicator(h, cp);
    std::vector<double> s(S - cp.window, 0.0);
    for (const auto& v : per_q)
      for (size_t i = 0; i < s.size(); ++i) s[i] += v[i] / h.G;
    return sorted_union(top(s, range(0, S - cp.window), b[l]), range(S - cp.window, S));
  });
}

KeptSets nacl(const PromptData& p, const NaclParams& np) {
  return per_head(p, [&](int l, int kv, const HeadData& h) {
    std::vector<double> s(h.S, 0.0);
    for (int g = 0; g < h.G; ++g)
      for (int w = 0; w < h.W; ++w)
        for (int n = 0; n < h.S; ++n) s[n] += wa(h, g, w, n) / h.G;
    const auto mid = range(np.sinks, h.S - np.recent);
    const auto topk = top(s, mid, np.top);
    std::vector<bool> taken(h.S, false);
    for (int i : topk) taken[i] = true;
    // Gumbel-top-k over the rest: an exact sample without replacement from softmax(s / T).
    std::vector<double> key(h.S, -INFINITY);
    std::vector<int> rest;
    for (int i : mid)
      if (!taken[i]) {
        rest.push_back(i);
        const double u = counter_uniform(np.seed, l, kv, i, kSamplingStream);
        key[i] = s[i] / np.temperature - std::log(-std::log(u));
      }
    auto rnd = top(key, rest, np.random);
    return sorted_union(sorted_union(topk, rnd), sorted_union(range(0, np.sinks), range(h.S - np.recent, h.S)));
  });
}

std::vector<int> spindle_layer_keep(int L, int S, const SpindleParams& sp) {
  const double lc = S - sp.window, alpha = (1 + sp.beta) / 2;
  const double rc = (sp.ratio * S - sp.window) / lc;
  const bool low = sp.beta < rc && rc <= alpha;
  const double r0 = low ? 2 * rc - sp.beta : 1.0, rl = low ? sp.beta : 2 * rc - 1;
  // Sinks are kept and counted in the budget: the ramp's share of each layer shrinks in proportion.
  const double share = sp.sinks > 0 ? (sp.ratio * S - sp.window - sp.sinks) / (sp.ratio * S - sp.window) : 1.0;
  std::vector<int> out(L);
  for (int l = 0; l < L; ++l) out[l] = static_cast<int>(std::floor((r0 + (rl - r0) * l / (L - 1)) * lc * share));
  return out;
}

KeptSets spindlekv_eviction(const PromptData& p, const SpindleParams& sp) {
  const int L = static_cast<int>(p.size()), S = p[0][0].S, n = S - sp.window;
  const auto keep = spindle_layer_keep(L, S, sp);
  const std::vector<int> protect = sorted_union(range(0, sp.sinks), range(n, S));
  const std::vector<int> cands = range(sp.sinks, n);
  KeptSets out(L);
  for (int l = 0; l < L; ++l)
    for (const HeadData& h : p[l]) {
      std::vector<std::vector<double>> ac(h.G, std::vector<double>(n, 0.0));
      for (int g = 0; g < h.G; ++g) {
        for (int a = 0; a < n; ++a) {
          for (int w = h.W - sp.window; w < h.W; ++w) ac[g][a] += wa(h, g, w, a);
          ac[g][a] /= (S - a);  // eq. 2: queries that can see token a
        }
        if (sp.kernel > 0) ac[g] = pool(ac[g], sp.kernel, sp.max_pool);
      }
      if (sp.unfold) {
        for (int g = 0; g < h.G; ++g) out[l].push_back(sorted_union(top(ac[g], cands, keep[l]), protect));
      } else {
        std::vector<double> m(n, 0.0);
        for (int g = 0; g < h.G; ++g)
          for (int a = 0; a < n; ++a) m[a] += ac[g][a] / h.G;
        out[l].push_back(sorted_union(top(m, cands, keep[l]), protect));
      }
    }
  return out;
}

}  // namespace kvevict::reference
