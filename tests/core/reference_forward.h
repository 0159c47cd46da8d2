#pragma once
// An independent, deliberately naive forward pass in double precision: no BLAS, no cache, no tiling,
// every token recomputed from scratch. The tests compare the optimised decoder against it.
// `visible(layer, kv_head, query_pos, key_pos)` says which keys a query may attend to (causal by
// default); eviction tests restrict it to the kept set.
#include <cmath>
#include <functional>
#include <vector>

#include "core/model/model.h"

namespace kvevict::test {

struct ReferenceResult {
  std::vector<std::vector<double>> logits;  // [token][vocab]
  // probs[layer][q_head][query][key]: attention probabilities (0 where not visible)
  std::vector<std::vector<std::vector<std::vector<double>>>> probs;
  std::vector<std::vector<std::vector<double>>> queries;  // [layer][token][q_dim], post-RoPE
  std::vector<std::vector<std::vector<double>>> queries_pre_rope;  // [layer][token][q_dim]
  std::vector<std::vector<std::vector<double>>> values;            // [layer][token][kv_dim]
  std::vector<std::vector<std::vector<double>>> outputs;  // [layer][token][q_dim] attention outputs before W_o
  std::vector<std::vector<double>> hidden_norms;          // [layer][token] ||layer input|| (before the norm)
  std::vector<std::vector<std::vector<double>>> attention_inputs;  // [layer][token][dim] the layer input after its RMSNorm
};

using Visibility = std::function<bool(int layer, int kv_head, int query_pos, int key_pos)>;
// Per query head (an unfolded cache, where each query head keeps its own set); consulted as well.
using QueryHeadVisibility = std::function<bool(int layer, int q_head, int query_pos, int key_pos)>;

inline std::vector<double> ref_rope(std::vector<double> x, int pos, const ModelConfig& c) {
  const int d = c.head_dim, half = d / 2;
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(double(c.rope_theta), -2.0 * i / d);
    const RopeScaling& s = c.rope_scaling;
    if (s.type == "linear") freq /= s.factor;
    if (s.type == "llama3") {
      const double wavelen = 2 * M_PI / freq;
      const double lo = s.original_max_position / s.low_freq_factor, hi = s.original_max_position / s.high_freq_factor;
      if (wavelen > lo) {
        freq /= s.factor;
      } else if (wavelen >= hi) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        freq = (1 - smooth) * freq / s.factor + smooth * freq;
      }
    }
    const int a = c.rope_style == RopeStyle::AdjacentPairs ? 2 * i : i;
    const int b = c.rope_style == RopeStyle::AdjacentPairs ? 2 * i + 1 : i + half;
    const double angle = pos * freq, x0 = x[a], x1 = x[b];
    x[a] = x0 * std::cos(angle) - x1 * std::sin(angle);
    x[b] = x0 * std::sin(angle) + x1 * std::cos(angle);
  }
  return x;
}

inline ReferenceResult reference_forward(const Model& m, const std::vector<int>& tokens, Visibility visible = nullptr,
                                         QueryHeadVisibility visible_q = nullptr) {
  const ModelConfig& c = m.config;
  const Weights& w = m.weights;
  const int n = static_cast<int>(tokens.size()), D = c.dim, hd = c.head_dim, G = c.group_size();
  auto matvec = [](const std::vector<float>& W, const std::vector<double>& x, int out, const std::vector<float>* bias) {
    std::vector<double> y(out);
    const size_t in = x.size();
    for (int o = 0; o < out; ++o) {
      double s = bias && !bias->empty() ? (*bias)[o] : 0.0;
      for (size_t i = 0; i < in; ++i) s += double(W[o * in + i]) * x[i];
      y[o] = s;
    }
    return y;
  };
  auto rmsnorm = [&](const std::vector<double>& x, const std::vector<float>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double scale = 1.0 / std::sqrt(ss / x.size() + c.norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * g[i];
    return y;
  };
  std::vector<std::vector<double>> x(n, std::vector<double>(D));
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < D; ++i) x[t][i] = w.token_embedding[size_t(tokens[t]) * D + i];
  }
  ReferenceResult r;
  r.probs.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    std::vector<std::vector<double>> q(n), k(n), v(n);
    r.hidden_norms.emplace_back(n);
    r.queries_pre_rope.emplace_back(n);
    r.attention_inputs.emplace_back(n);
    for (int t = 0; t < n; ++t) {
      double ss = 0;
      for (double e : x[t]) ss += e * e;
      r.hidden_norms[l][t] = std::sqrt(ss);
      const auto xn = rmsnorm(x[t], L.attn_norm);
      r.attention_inputs[l][t] = xn;
      q[t] = matvec(L.wq, xn, c.q_dim(), &L.bq);
      r.queries_pre_rope[l][t] = q[t];
      k[t] = matvec(L.wk, xn, c.kv_dim(), &L.bk);
      v[t] = matvec(L.wv, xn, c.kv_dim(), &L.bv);
      for (int h = 0; h < c.n_heads; ++h) {
        std::vector<double> head(q[t].begin() + h * hd, q[t].begin() + (h + 1) * hd);
        head = ref_rope(head, t, c);
        std::copy(head.begin(), head.end(), q[t].begin() + h * hd);
      }
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<double> head(k[t].begin() + h * hd, k[t].begin() + (h + 1) * hd);
        head = ref_rope(head, t, c);
        std::copy(head.begin(), head.end(), k[t].begin() + h * hd);
      }
    }
    r.queries.push_back(q);
    r.values.push_back(v);
    r.probs[l].assign(c.n_heads, std::vector<std::vector<double>>(n, std::vector<double>(n, 0.0)));
    std::vector<std::vector<double>> att(n, std::vector<double>(c.q_dim(), 0.0));
    for (int h = 0; h < c.n_heads; ++h) {
      const int kvh = h / G;
      for (int t = 0; t < n; ++t) {
        std::vector<double> s(n, -INFINITY);
        double mx = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          if (visible && !visible(l, kvh, t, u)) continue;
          if (visible_q && !visible_q(l, h, t, u)) continue;
          double dot = 0;
          for (int i = 0; i < hd; ++i) dot += q[t][h * hd + i] * k[u][kvh * hd + i];
          s[u] = dot / std::sqrt(double(hd));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) sum += s[u] == -INFINITY ? 0.0 : std::exp(s[u] - mx);
        for (int u = 0; u <= t; ++u) {
          const double p = s[u] == -INFINITY ? 0.0 : std::exp(s[u] - mx) / sum;
          r.probs[l][h][t][u] = p;
          for (int i = 0; i < hd; ++i) att[t][h * hd + i] += p * v[u][kvh * hd + i];
        }
      }
    }
    r.outputs.push_back(att);
    for (int t = 0; t < n; ++t) {
      const auto o = matvec(L.wo, att[t], D, nullptr);
      for (int i = 0; i < D; ++i) x[t][i] += o[i];
      const auto xn = rmsnorm(x[t], L.ffn_norm);
      auto g = matvec(L.w_gate, xn, c.hidden_dim, nullptr);
      const auto u = matvec(L.w_up, xn, c.hidden_dim, nullptr);
      for (int i = 0; i < c.hidden_dim; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      const auto down = matvec(L.w_down, g, D, nullptr);
      for (int i = 0; i < D; ++i) x[t][i] += down[i];
    }
  }
  for (int t = 0; t < n; ++t) r.logits.push_back(matvec(w.output_matrix(), rmsnorm(x[t], w.final_norm), c.vocab_size, nullptr));
  return r;
}

}  // namespace kvevict::test
