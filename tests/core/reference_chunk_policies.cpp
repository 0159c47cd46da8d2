#include "reference_chunk_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"

namespace kvevict::reference {
namespace {

double dot(const float* a, const float* b, int d) {
  double s = 0;
  for (int e = 0; e < d; ++e) s += static_cast<double>(a[e]) * b[e];
  return s;
}

const float* qrow(const PromptQkv& p, int l, int pos, int qh) {
  return p.q[l].data() + (static_cast<size_t>(pos) * p.Hq + qh) * p.d;
}
const float* krow(const PromptQkv& p, int l, int kv, int pos) { return p.k[l][kv].data() + static_cast<size_t>(pos) * p.d; }

// Softmax of query head qh at `pos` over the keys lo..hi-1 of its KV head (those <= pos when
// causal); returns probabilities indexed lo..hi-1 (0 where not visible).
std::vector<double> softmax(const PromptQkv& p, int l, int qh, int pos, int lo, int hi, bool causal, bool scaled) {
  const int kv = qh / p.G;
  std::vector<double> a(hi - lo, 0.0);
  const int last = causal ? std::min(hi, pos + 1) : hi;
  double mx = -INFINITY;
  for (int j = lo; j < last; ++j) {
    a[j - lo] = dot(qrow(p, l, pos, qh), krow(p, l, kv, j), p.d) / (scaled ? std::sqrt(static_cast<double>(p.d)) : 1.0);
    mx = std::max(mx, a[j - lo]);
  }
  double z = 0;
  for (int j = lo; j < last; ++j) z += (a[j - lo] = std::exp(a[j - lo] - mx));
  for (int j = lo; j < last; ++j) a[j - lo] /= z;
  return a;
}

// avg_pool1d(kernel, padding kernel/2, zero padding counted) of x.
std::vector<double> avg_pool(const std::vector<double>& x, int kernel) {
  const int n = static_cast<int>(x.size()), r = kernel / 2;
  std::vector<double> y(n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int k = -r; k <= r; ++k)
      if (i + k >= 0 && i + k < n) y[i] += x[i + k];
    y[i] /= kernel;
  }
  return y;
}

// kvpress SnapKV on the positions lo..hi-1 alone (keys and window queries of that span): the
// pooled group-mean scores of the non-window positions lo..hi-W-1 (index 0 = lo).
std::vector<double> snap_span(const PromptQkv& p, int l, int kv, int lo, int hi, const SnapInner& sp) {
  const int W = std::min(sp.window, hi - lo), n = hi - lo - W;
  std::vector<double> mean(std::max(n, 0), 0.0);
  if (n <= 0) return mean;
  for (int g = 0; g < p.G; ++g) {
    std::vector<double> col(n, 0.0);
    for (int i = hi - W; i < hi; ++i) {
      const auto a = softmax(p, l, kv * p.G + g, i, lo, hi, true, true);
      for (int j = 0; j < n; ++j) col[j] += a[j] / W;
    }
    const auto pooled = avg_pool(col, sp.kernel);
    for (int j = 0; j < n; ++j) mean[j] += pooled[j] / p.G;
  }
  return mean;
}

std::vector<int> top_positions(const std::vector<double>& score, std::vector<int> cands, int k) {
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  cands.resize(std::clamp(k, 0, static_cast<int>(cands.size())));
  return cands;
}

std::vector<int> all(int n) {
  std::vector<int> r(n);
  std::iota(r.begin(), r.end(), 0);
  return r;
}

}  // namespace

PromptQkv record_qkv(const Model& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config;
  PromptQkv p;
  p.S = static_cast<int>(tokens.size());
  p.L = c.n_layers;
  p.Hq = c.n_heads;
  p.Hkv = c.n_kv_heads;
  p.G = c.group_size();
  p.d = c.head_dim;
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder rec(p.S, false);
  decoder->forward(std::span<const int>(tokens), &rec);
  const KVCache& cache = decoder->cache();
  for (int l = 0; l < p.L; ++l) {
    p.q.push_back(rec.layers()[l].window_queries);
    p.k.emplace_back();
    p.v.emplace_back();
    for (int kv = 0; kv < p.Hkv; ++kv) {
      p.k[l].emplace_back(cache.keys(l, kv), cache.keys(l, kv) + static_cast<size_t>(p.S) * p.d);
      p.v[l].emplace_back(cache.values(l, kv), cache.values(l, kv) + static_cast<size_t>(p.S) * p.d);
    }
  }
  return p;
}

std::vector<int> whole_chunks_keep(const std::vector<double>& score, int chunk, int budget, int aggregate) {
  const int n = static_cast<int>(score.size());
  if (budget >= n) return all(n);
  const int chunks = (n + chunk - 1) / chunk;
  std::vector<double> cs(chunks);
  for (int c = 0; c < chunks; ++c) {
    const int lo = c * chunk, hi = std::min(n, lo + chunk);
    double acc = aggregate == 2 ? -INFINITY : 0.0;
    for (int t = lo; t < hi; ++t) acc = aggregate == 2 ? std::max(acc, score[t]) : acc + score[t];
    cs[c] = aggregate == 0 ? acc / (hi - lo) : acc;
  }
  const std::vector<int> order = top_positions(cs, all(chunks), chunks);
  std::vector<int> kept;
  int left = budget;
  for (int c : order) {
    const int lo = c * chunk, hi = std::min(n, lo + chunk);
    if (hi - lo > left) break;
    left -= hi - lo;
    for (int t = lo; t < hi; ++t) kept.push_back(t);
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<int> per_chunk_keep(const std::vector<double>& score, int chunk, int budget) {
  const int n = static_cast<int>(score.size());
  if (budget >= n) return all(n);
  const int chunks = (n + chunk - 1) / chunk;
  // quota_c = floor(budget * len_c / n), then one more to the largest remainders (budget * len_c
  // mod n, exact in integers), ties to the lower chunk.
  std::vector<int64_t> quota(chunks), rem(chunks);
  int64_t given = 0;
  for (int c = 0; c < chunks; ++c) {
    const int64_t len = std::min(n, (c + 1) * chunk) - c * chunk;
    quota[c] = static_cast<int64_t>(budget) * len / n;
    rem[c] = static_cast<int64_t>(budget) * len % n;
    given += quota[c];
  }
  std::vector<int> order = all(chunks);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rem[a] > rem[b]; });
  for (int i = 0; i < budget - given; ++i) ++quota[order[i]];
  std::vector<int> kept;
  for (int c = 0; c < chunks; ++c) {
    std::vector<int> members;
    for (int t = c * chunk; t < std::min(n, (c + 1) * chunk); ++t) members.push_back(t);
    const auto top = top_positions(score, members, static_cast<int>(quota[c]));
    kept.insert(kept.end(), top.begin(), top.end());
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

namespace {
// ChunkKV's layer scores: each KV head's SnapKV scores, the window tokens at the head's maximum,
// averaged over the heads.
std::vector<double> chunkkv_layer_scores(const PromptQkv& p, int l, const SnapInner& sp) {
  std::vector<double> layer(p.S, 0.0);
  for (int kv = 0; kv < p.Hkv; ++kv) {
    std::vector<double> s = snap_span(p, l, kv, 0, p.S, sp);  // the S - W positions before the window
    double top = 0;
    for (double x : s) top = std::max(top, x);
    s.resize(p.S, top);  // the window tokens
    for (int t = 0; t < p.S; ++t) layer[t] += s[t] / p.Hkv;
  }
  return layer;
}
}  // namespace

KeptSets chunkkv(const PromptQkv& p, int budget, int chunk, const SnapInner& sp) {
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l) out[l].assign(p.Hkv, whole_chunks_keep(chunkkv_layer_scores(p, l, sp), chunk, budget, 0));
  return out;
}

KeptSets entropy_gated_chunkkv(const PromptQkv& p, int budget, int chunk, int rescue, const SnapInner& sp) {
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    out[l].assign(p.Hkv, entropy_gated_keep(chunkkv_layer_scores(p, l, sp), chunk, budget, rescue));
  return out;
}

// kvpress EntropyGatedChunkKVPress.compress on one score vector (positions 0..n-1).
std::vector<int> entropy_gated_keep(const std::vector<double>& score, int chunk, int budget, int rescue) {
  const int n = static_cast<int>(score.size());
  if (budget >= n) return all(n);
  const int chunks = (n + chunk - 1) / chunk;
  std::vector<double> mean(chunks), ent(chunks);
  for (int c = 0; c < chunks; ++c) {
    const int lo = c * chunk, hi = std::min(n, lo + chunk), len = hi - lo;
    double sum = 0, mn = 0;
    for (int t = lo; t < hi; ++t) {
      sum += score[t];
      mn = std::min(mn, score[t]);
    }
    mean[c] = sum / len;
    if (len == 1) {
      ent[c] = 0;
      continue;
    }
    double shifted = 0;
    for (int t = lo; t < hi; ++t) shifted += score[t] - mn;
    double h = 0;
    for (int t = lo; t < hi; ++t) {
      const double q = (score[t] - mn) / (shifted + 1e-8);
      h -= q * std::log(q + 1e-8);
    }
    ent[c] = std::clamp(h / std::log(static_cast<double>(len)), 0.0, 1.0);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
  };
  const double ms = median(mean), me = median(ent);
  std::vector<bool> keep(n, false);
  int left = budget;
  for (int c : top_positions(mean, all(chunks), chunks)) {
    if (left <= 0) break;
    const int lo = c * chunk, hi = std::min(n, lo + chunk);
    int k = std::min(hi - lo, left);
    if (mean[c] >= ms && ent[c] < me - 1e-9) k = std::min(k, rescue);  // equal up to rounding: not below
    std::vector<int> members;
    for (int t = lo; t < hi; ++t) members.push_back(t);
    for (int t : top_positions(score, members, k)) keep[t] = true;
    left -= k;
  }
  std::vector<int> rest;
  for (int t = 0; t < n; ++t)
    if (!keep[t]) rest.push_back(t);
  for (int t : top_positions(score, rest, left)) keep[t] = true;
  std::vector<int> kept;
  for (int t = 0; t < n; ++t)
    if (keep[t]) kept.push_back(t);
  return kept;
}

KeptSets chunkpress(const PromptQkv& p, int budget, int chunk, const SnapInner& sp) {
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) {
      std::vector<double> score(p.S);
      for (int lo = 0; lo < p.S; lo += chunk) {
        const int hi = std::min(p.S, lo + chunk);
        const std::vector<double> s = snap_span(p, l, kv, lo, hi, sp);
        for (int t = lo; t < hi; ++t) score[t] = t - lo < static_cast<int>(s.size()) ? s[t - lo] : 1e300;
      }
      out[l].push_back(per_chunk_keep(score, chunk, budget));
    }
  return out;
}

KeptSets noncausal_attn(const PromptQkv& p, int budget, int chunk) {
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) {
      std::vector<double> a(p.S, 0.0);
      for (int g = 0; g < p.G; ++g)
        for (int lo = 0; lo < p.S; lo += chunk) {
          const int hi = std::min(p.S, lo + chunk);
          for (int i = lo; i < hi; ++i) {
            const auto row = softmax(p, l, kv * p.G + g, i, lo, hi, false, false);
            for (int j = lo; j < hi; ++j) a[j] += row[j - lo] / p.G;
          }
        }
      for (int t = 0; t < p.S; ++t) a[t] *= std::sqrt(dot(p.v[l][kv].data() + static_cast<size_t>(t) * p.d,
                                                          p.v[l][kv].data() + static_cast<size_t>(t) * p.d, p.d));
      std::vector<double> s = avg_pool(a, 3);
      double mu = 0, var = 0;
      for (double x : s) mu += x / p.S;
      for (double x : s) var += (x - mu) * (x - mu) / (p.S - 1);
      for (double& x : s) x = (x - mu) / std::max(std::sqrt(var), 1e-6);
      out[l].push_back(budget >= p.S ? all(p.S) : [&] {
        auto k = top_positions(s, all(p.S), budget);
        std::sort(k.begin(), k.end());
        return k;
      }());
    }
  return out;
}

}  // namespace kvevict::reference
