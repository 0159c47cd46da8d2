#include "reference_query_policies.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace kvevict::reference {
namespace {

double frequency(const ModelConfig& c, int i) {
  if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "none")
    throw std::invalid_argument("reference: rope scaling is not implemented here");
  return std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
}

void pair_of(const ModelConfig& c, int i, int& a, int& b) {
  const bool adjacent = c.rope_style == RopeStyle::AdjacentPairs;
  a = adjacent ? 2 * i : i;
  b = adjacent ? 2 * i + 1 : i + c.head_dim / 2;
}

// Sinks first, then the top `budget - sinks` positions of `score` among [sinks, n), ascending.
std::vector<int> keep_top(const std::vector<double>& score, int sinks, int budget) {
  const int n = static_cast<int>(score.size());
  std::vector<int> out;
  for (int t = 0; t < std::min(sinks, n); ++t) out.push_back(t);
  std::vector<int> rest;
  for (int t = sinks; t < n; ++t) rest.push_back(t);
  std::stable_sort(rest.begin(), rest.end(), [&](int x, int y) { return score[x] > score[y]; });
  const int take = std::clamp(budget - static_cast<int>(out.size()), 0, static_cast<int>(rest.size()));
  out.insert(out.end(), rest.begin(), rest.begin() + take);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<double> unrotate(const float* x, int pos, const ModelConfig& c) {
  std::vector<double> y(x, x + c.head_dim);
  for (int i = 0; i < c.head_dim / 2; ++i) {
    int a, b;
    pair_of(c, i, a, b);
    const double angle = pos * frequency(c, i), x0 = x[a], x1 = x[b];
    y[a] = x0 * std::cos(angle) + x1 * std::sin(angle);  // the rotation by -angle
    y[b] = -x0 * std::sin(angle) + x1 * std::cos(angle);
  }
  return y;
}

std::vector<double> mean_rope_matrix(const ModelConfig& c, int p0, int n) {
  const int d = c.head_dim;
  std::vector<double> R(static_cast<size_t>(d) * d, 0.0);
  for (int p = p0; p < p0 + n; ++p)
    for (int i = 0; i < d / 2; ++i) {
      int a, b;
      pair_of(c, i, a, b);
      const double co = std::cos(p * frequency(c, i)) / n, si = std::sin(p * frequency(c, i)) / n;
      R[a * d + a] += co;
      R[a * d + b] -= si;
      R[b * d + a] += si;
      R[b * d + b] += co;
    }
  return R;
}

void query_moments(const PromptQkv& p, const ModelConfig& c, int layer, int from, std::vector<double>& mean,
                   std::vector<double>& cov) {
  const int d = p.d, n = p.S - from;
  mean.assign(static_cast<size_t>(p.Hq) * d, 0.0);
  cov.assign(static_cast<size_t>(p.Hq) * d * d, 0.0);
  for (int h = 0; h < p.Hq; ++h) {
    std::vector<std::vector<double>> rows;
    for (int i = from; i < p.S; ++i) rows.push_back(unrotate(p.q[layer].data() + (static_cast<size_t>(i) * p.Hq + h) * d, i, c));
    for (const auto& r : rows)
      for (int a = 0; a < d; ++a) mean[h * d + a] += r[a] / n;
    for (const auto& r : rows)
      for (int a = 0; a < d; ++a)
        for (int b = 0; b < d; ++b)
          cov[(static_cast<size_t>(h) * d + a) * d + b] += (r[a] - mean[h * d + a]) * (r[b] - mean[h * d + b]) / n;
  }
}

std::vector<double> expected_attention_log_scores(const PromptQkv& p, const ModelConfig& c, int l, int kv,
                                                  const std::vector<double>& mean, const std::vector<double>& cov,
                                                  const ExpectedAttentionParams& ep) {
  const int d = p.d;
  const std::vector<double> R = mean_rope_matrix(c, p.S, ep.n_future);
  std::vector<std::vector<double>> log_p(p.G, std::vector<double>(p.S, -INFINITY));
  for (int g = 0; g < p.G; ++g) {
    const int h = kv * p.G + g;
    // mu' = R mu, cov' = R cov R^T.
    std::vector<double> mu(d, 0.0), rc(static_cast<size_t>(d) * d, 0.0), cv(static_cast<size_t>(d) * d, 0.0);
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) mu[a] += R[a * d + b] * mean[h * d + b];
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b)
        for (int k = 0; k < d; ++k) rc[a * d + b] += R[a * d + k] * cov[(static_cast<size_t>(h) * d + k) * d + b];
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b)
        for (int k = 0; k < d; ++k) cv[a * d + b] += rc[a * d + k] * R[b * d + k];
    std::vector<double> logit(p.S, -INFINITY);
    double mx = -INFINITY;
    for (int t = ep.n_sink; t < p.S; ++t) {
      const float* k = p.k[l][kv].data() + static_cast<size_t>(t) * d;
      double x = 0;
      for (int a = 0; a < d; ++a) x += k[a] * mu[a];
      x /= std::sqrt(static_cast<double>(d));
      if (ep.covariance) {
        double q = 0;
        for (int a = 0; a < d; ++a)
          for (int b = 0; b < d; ++b) q += k[a] * cv[a * d + b] * k[b];
        x += q / d / 2;
      }
      logit[t] = x;
      mx = std::max(mx, x);
    }
    double z = 0;
    for (int t = ep.n_sink; t < p.S; ++t) z += std::exp(logit[t] - mx);
    for (int t = ep.n_sink; t < p.S; ++t) log_p[g][t] = logit[t] - mx - std::log(z);
  }
  std::vector<double> score(p.S, -INFINITY);
  for (int t = ep.n_sink; t < p.S; ++t) {
    double m = -INFINITY, sum = 0;
    for (int g = 0; g < p.G; ++g) m = std::max(m, log_p[g][t]);
    for (int g = 0; g < p.G; ++g) sum += std::exp(log_p[g][t] - m);
    const double log_mean = m + std::log(sum / p.G);
    score[t] = ep.epsilon > 0 ? std::log(std::exp(log_mean) + ep.epsilon) : log_mean;
    if (ep.vnorm) {
      const float* v = p.v[l][kv].data() + static_cast<size_t>(t) * d;
      double s2 = 0;
      for (int a = 0; a < d; ++a) s2 += static_cast<double>(v[a]) * v[a];
      score[t] += 0.5 * std::log(s2);
    }
  }
  return score;
}

KeptSets expected_attention(const PromptQkv& p, const ModelConfig& c, int budget, const ExpectedAttentionParams& ep) {
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l) {
    std::vector<double> mean, cov;
    query_moments(p, c, l, ep.n_sink, mean, cov);
    for (int kv = 0; kv < p.Hkv; ++kv) {
      const std::vector<double> score = expected_attention_log_scores(p, c, l, kv, mean, cov, ep);
      out[l].push_back(budget >= p.S ? keep_top(score, p.S, p.S) : keep_top(score, ep.n_sink, budget));
    }
  }
  return out;
}

KeptSets finch(const PromptQkv& p, const std::vector<int>& tokens, int budget, int delimiter, bool normalize,
               int fallback) {
  int last = -1;
  for (int i = 0; i < p.S; ++i)
    if (tokens[i] == delimiter) last = i;
  if (last < 0 && fallback <= 0) throw std::invalid_argument("reference finch: no delimiter");
  const int W = last < 0 ? fallback : p.S - 1 - last, first = p.S - W, d = p.d;
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l)
    for (int kv = 0; kv < p.Hkv; ++kv) {
      std::vector<double> score(p.S, 0.0);
      for (int g = 0; g < p.G; ++g) {
        const int h = kv * p.G + g;
        for (int row = first; row < p.S; ++row) {
          const float* q = p.q[l].data() + (static_cast<size_t>(row) * p.Hq + h) * d;
          std::vector<double> a(row + 1);
          double mx = -INFINITY;
          for (int t = 0; t <= row; ++t) {
            double x = 0;
            for (int c = 0; c < d; ++c) x += static_cast<double>(q[c]) * p.k[l][kv][static_cast<size_t>(t) * d + c];
            a[t] = x / std::sqrt(static_cast<double>(d));
            mx = std::max(mx, a[t]);
          }
          double z = 0;
          for (double& x : a) z += (x = std::exp(x - mx));
          for (int t = 0; t < first; ++t) score[t] += a[t] / z * (normalize ? row : 1) / W / p.G;
        }
      }
      for (int t = first; t < p.S; ++t) score[t] = INFINITY;
      out[l].push_back(keep_top(score, 0, budget));
    }
  return out;
}

}  // namespace kvevict::reference
