#include "reference_linalg_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <stdexcept>
#include <utility>

#include "core/decode/decoder.h"
#include "core/decode/rope.h"
#include "core/engine/engine.h"
#include "core/engine/gaussian_rng.h"

namespace kvevict::reference {
namespace {

using Mat = std::vector<long double>;  // row-major n x n

// Solves A X = B for X (A n x n, B n x m, both row-major) by Gauss-Jordan with partial pivoting.
std::vector<long double> solve(Mat a, std::vector<long double> b, int n, int m) {
  for (int c = 0; c < n; ++c) {
    int piv = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[piv * n + c])) piv = r;
    if (a[piv * n + c] == 0.0L) throw std::runtime_error("reference solve: singular matrix");
    for (int j = 0; j < n; ++j) std::swap(a[c * n + j], a[piv * n + j]);
    for (int j = 0; j < m; ++j) std::swap(b[c * m + j], b[piv * m + j]);
    const long double p = a[c * n + c];
    for (int j = 0; j < n; ++j) a[c * n + j] /= p;
    for (int j = 0; j < m; ++j) b[c * m + j] /= p;
    for (int r = 0; r < n; ++r) {
      if (r == c || a[r * n + c] == 0.0L) continue;
      const long double f = a[r * n + c];
      for (int j = 0; j < n; ++j) a[r * n + j] -= f * a[c * n + j];
      for (int j = 0; j < m; ++j) b[r * m + j] -= f * b[c * m + j];
    }
  }
  return b;
}

// Protected slots plus the top `budget - |protected|` of the others (higher score, then smaller
// position), ascending.
std::vector<int> keep(const std::vector<double>& score, int budget, const std::vector<bool>& is_protected) {
  const int S = static_cast<int>(score.size());
  std::vector<int> kept, cands;
  for (int t = 0; t < S; ++t) (is_protected[t] ? kept : cands).push_back(t);
  if (budget >= S) {
    std::vector<int> all(S);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  std::stable_sort(cands.begin(), cands.end(), [&](int a, int b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
  const int n = std::clamp(budget - static_cast<int>(kept.size()), 0, static_cast<int>(cands.size()));
  kept.insert(kept.end(), cands.begin(), cands.begin() + n);
  std::sort(kept.begin(), kept.end());
  return kept;
}

const float* row(const std::vector<float>& rows, int t, int d) { return rows.data() + static_cast<size_t>(t) * d; }

// (x - mean over lo..hi-1) / unbiased std (clamped at 1e-6, as kvpress) over lo..hi-1.
void z_score(std::vector<double>& x, int lo, int hi) {
  const int n = hi - lo;
  double mu = 0, var = 0;
  for (int t = lo; t < hi; ++t) mu += x[t] / n;
  for (int t = lo; t < hi; ++t) var += (x[t] - mu) * (x[t] - mu) / (n - 1);
  for (int t = lo; t < hi; ++t) x[t] = (x[t] - mu) / std::max(std::sqrt(var), 1e-6);
}

}  // namespace

LinalgPrompt record_linalg(const Model& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config;
  LinalgPrompt p;
  p.S = static_cast<int>(tokens.size());
  p.L = c.n_layers;
  p.Hq = c.n_heads;
  p.Hkv = c.n_kv_heads;
  p.G = c.group_size();
  p.d = c.head_dim;
  const Rope rope(c);
  for (int i = 0; i < p.d / 2; ++i) p.inv_freq.push_back(rope.inverse_frequency(i));
  p.half_split = c.rope_style == RopeStyle::HalfSplit;
  auto decoder = make_cpu_decoder(model, {.threads = 1, .kv_type = KvType::F32});
  PrefillRecorder rec(p.S, false);
  decoder->forward(std::span<const int>(tokens), &rec);
  const KVCache& cache = decoder->cache();
  const size_t n = static_cast<size_t>(p.S) * p.d;
  for (int l = 0; l < p.L; ++l) {
    p.q.push_back(rec.layers()[l].window_queries);
    p.k.emplace_back();
    p.k_pre.emplace_back();
    p.v.emplace_back();
    for (int kv = 0; kv < p.Hkv; ++kv) {
      p.k[l].emplace_back(cache.keys(l, kv), cache.keys(l, kv) + n);
      p.k_pre[l].push_back(cache.keys_pre_rope(l, kv));
      p.v[l].emplace_back(cache.values(l, kv), cache.values(l, kv) + n);
    }
  }
  return p;
}

std::vector<double> leverage_scores(const LinalgPrompt& p, int layer, int kv_head, int sketch, uint64_t seed, int lo, int hi) {
  const int d = p.d, k = std::min(sketch, d), n = hi - lo;
  const std::vector<float>& keys = p.k_pre[layer][kv_head];
  std::vector<double> mu(d, 0.0);
  for (int t = lo; t < hi; ++t)
    for (int c = 0; c < d; ++c) mu[c] += static_cast<double>(row(keys, t, d)[c]) / n;
  // X = (K - mu) Phi, Phi = randn / sqrt(k): n x k.
  std::vector<long double> x(static_cast<size_t>(n) * k, 0.0L);
  for (int t = lo; t < hi; ++t)
    for (int e = 0; e < k; ++e) {
      long double s = 0;
      for (int c = 0; c < d; ++c)
        s += (row(keys, t, d)[c] - mu[c]) *
             static_cast<long double>(kv_dsl_randn(seed, static_cast<unsigned>(layer), static_cast<unsigned>(kv_head),
                                                   static_cast<unsigned>(c), static_cast<unsigned>(e)));
      x[static_cast<size_t>(t - lo) * k + e] = s / std::sqrt(static_cast<long double>(k));
    }
  Mat gram(static_cast<size_t>(k) * k, 0.0L);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      for (int t = 0; t < n; ++t) gram[i * k + j] += x[static_cast<size_t>(t) * k + i] * x[static_cast<size_t>(t) * k + j];
      if (i == j) gram[i * k + j] += 1e-2L;
    }
  std::vector<long double> xt(static_cast<size_t>(k) * n);  // X^T, k x n
  for (int t = 0; t < n; ++t)
    for (int e = 0; e < k; ++e) xt[static_cast<size_t>(e) * n + t] = x[static_cast<size_t>(t) * k + e];
  const std::vector<long double> y = solve(gram, xt, k, n);  // (X^T X + 1e-2 I)^-1 X^T
  std::vector<double> score(p.S, 0.0);
  for (int t = 0; t < n; ++t) {
    long double s = 0;
    for (int e = 0; e < k; ++e) s += x[static_cast<size_t>(t) * k + e] * y[static_cast<size_t>(e) * n + t];
    score[lo + t] = static_cast<double>(std::max(s, 0.0L));
  }
  return score;
}

KeptSets leverage(const LinalgPrompt& p, int budget, int sketch, uint64_t seed) {
  KeptSets out(p.L);
  const std::vector<bool> none(p.S, false);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) out[l].push_back(keep(leverage_scores(p, l, kv, sketch, seed, 0, p.S), budget, none));
  return out;
}

namespace {
// The unprotected span [lo, hi) of CompactorPress: `start` sinks before it, `end` recent after.
std::pair<int, int> compactor_span(const LinalgPrompt& p, const CompactorParams& cp) {
  const int lo = std::min(cp.start, p.S), hi = std::max(lo, p.S - cp.end);
  return {lo, hi};
}
}  // namespace

std::vector<double> compactor_scores(const LinalgPrompt& p, int l, int kv, const CompactorParams& cp) {
  const auto [lo, hi] = compactor_span(p, cp);
  std::vector<double> lev = leverage_scores(p, l, kv, cp.sketch, cp.seed, lo, hi);
  z_score(lev, lo, hi);
  // Non-causal chunked attention (unscaled logits), summed over each chunk's queries, group mean.
  std::vector<double> a(p.S, 0.0);
  for (int g = 0; g < p.G; ++g) {
    const int qh = kv * p.G + g;
    for (int c0 = 0; c0 < p.S; c0 += cp.chunk) {
      const int c1 = std::min(p.S, c0 + cp.chunk);
      for (int i = c0; i < c1; ++i) {
        const float* q = p.q[l].data() + (static_cast<size_t>(i) * p.Hq + qh) * p.d;
        std::vector<double> logit(c1 - c0);
        double mx = -INFINITY, z = 0;
        for (int j = c0; j < c1; ++j) {
          double s = 0;
          for (int e = 0; e < p.d; ++e) s += static_cast<double>(q[e]) * row(p.k[l][kv], j, p.d)[e];
          mx = std::max(mx, logit[j - c0] = s);
        }
        for (double& x : logit) z += (x = std::exp(x - mx));
        for (int j = c0; j < c1; ++j) a[j] += logit[j - c0] / z / p.G;
      }
    }
  }
  std::vector<double> att(p.S, 0.0);
  for (int t = lo; t < hi; ++t) {
    double vn = 0;
    for (int e = 0; e < p.d; ++e) vn += static_cast<double>(row(p.v[l][kv], t, p.d)[e]) * row(p.v[l][kv], t, p.d)[e];
    a[t] *= std::sqrt(vn);
  }
  for (int t = lo; t < hi; ++t) {  // avg_pool1d(3, padding 1) over the unprotected span
    for (int j = std::max(lo, t - 1); j <= std::min(hi - 1, t + 1); ++j) att[t] += a[j];
    att[t] /= 3;
  }
  z_score(att, lo, hi);
  std::vector<double> score(p.S, 0.0);
  for (int t = lo; t < hi; ++t) score[t] = cp.blending * lev[t] + att[t];
  return score;
}

KeptSets compactor(const LinalgPrompt& p, int budget, const CompactorParams& cp) {
  const auto [lo, hi] = compactor_span(p, cp);
  std::vector<bool> is_protected(p.S, true);
  for (int t = lo; t < hi; ++t) is_protected[t] = false;
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) out[l].push_back(keep(compactor_scores(p, l, kv, cp), budget, is_protected));
  return out;
}

KeptSets cap(const LinalgPrompt& p, int budget, const CapParams& cp) {
  const int d = p.d, half = d / 2, sinks = std::min(cp.sinks, p.S);
  // The mean over the future positions of each pair's rotation: cos and sin averaged.
  std::vector<double> mc(half, 0.0), ms(half, 0.0);
  for (int i = 0; i < half; ++i)
    for (int f = 0; f < cp.future; ++f) {
      const double angle = static_cast<double>(p.S + f) * p.inv_freq[i];
      mc[i] += std::cos(angle) / cp.future;
      ms[i] += std::sin(angle) / cp.future;
    }
  auto pair = [&](int i) { return p.half_split ? std::pair{i, i + half} : std::pair{2 * i, 2 * i + 1}; };
  std::vector<bool> is_protected(p.S, false);
  for (int t = 0; t < sinks; ++t) is_protected[t] = true;
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) {
      const std::vector<float>& keys = p.k[l][kv];
      const std::vector<float>& vals = p.v[l][kv];
      std::vector<double> score(p.S, 0.0);
      for (int g = 0; g < p.G; ++g) {
        const int qh = kv * p.G + g;
        // Mean pre-RoPE query over positions sinks .. S-1 (each query rotated back by its own
        // position), then the averaged future rotation.
        std::vector<double> mq(d, 0.0), anchor(d, 0.0);
        for (int t = sinks; t < p.S; ++t) {
          const float* q = p.q[l].data() + (static_cast<size_t>(t) * p.Hq + qh) * d;
          for (int i = 0; i < half; ++i) {
            const auto [a, b] = pair(i);
            const double angle = static_cast<double>(t) * p.inv_freq[i], c = std::cos(angle), s = std::sin(angle);
            mq[a] += (c * q[a] + s * q[b]) / (p.S - sinks);
            mq[b] += (-s * q[a] + c * q[b]) / (p.S - sinks);
          }
        }
        for (int i = 0; i < half; ++i) {
          const auto [a, b] = pair(i);
          anchor[a] = mc[i] * mq[a] - ms[i] * mq[b];
          anchor[b] = ms[i] * mq[a] + mc[i] * mq[b];
        }
        double an = 0;
        for (double x : anchor) an += x * x;
        an = std::max(std::sqrt(an), 1e-12);
        std::vector<double> w(p.S, 0.0);
        double mx = -INFINITY;
        for (int t = sinks; t < p.S; ++t) {
          double dot = 0, kn = 0;
          for (int e = 0; e < d; ++e) {
            dot += row(keys, t, d)[e] * anchor[e];
            kn += static_cast<double>(row(keys, t, d)[e]) * row(keys, t, d)[e];
          }
          w[t] = cp.tau * std::clamp(dot / (std::max(std::sqrt(kn), 1e-12) * an), -1.0, 1.0);
          mx = std::max(mx, w[t]);
        }
        for (int t = sinks; t < p.S; ++t) w[t] = std::exp(w[t] - mx);
        Mat m(static_cast<size_t>(d) * d, 0.0L);
        for (int i = 0; i < d; ++i) m[i * d + i] = 1.0L;
        for (int t = sinks; t < p.S; ++t)
          for (int i = 0; i < d; ++i)
            for (int j = 0; j < d; ++j) m[i * d + j] += (w[t] + cp.epsilon) * row(vals, t, d)[i] * row(vals, t, d)[j];
        const int n = p.S - sinks;
        std::vector<long double> vt(static_cast<size_t>(d) * n);
        for (int t = 0; t < n; ++t)
          for (int e = 0; e < d; ++e) vt[static_cast<size_t>(e) * n + t] = row(vals, sinks + t, d)[e];
        const std::vector<long double> sol = solve(m, vt, d, n);
        for (int t = 0; t < n; ++t) {
          long double lev = 0;
          for (int e = 0; e < d; ++e) lev += vt[static_cast<size_t>(e) * n + t] * sol[static_cast<size_t>(e) * n + t];
          score[sinks + t] += w[sinks + t] * static_cast<double>(lev) / p.G;
        }
      }
      out[l].push_back(keep(score, budget, is_protected));
    }
  return out;
}

}  // namespace kvevict::reference
