#include "reference_stats_table_policies.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvevict::reference {
namespace {

// Positions 0..n-1 ranked by (rank class ascending, score descending, position ascending); the
// first `keep`, ascending.
std::vector<int> keep_ranked(const std::vector<int>& rank_class, const std::vector<double>& score, int keep) {
  const int n = static_cast<int>(score.size());
  std::vector<int> order(n);
  for (int t = 0; t < n; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    if (rank_class[x] != rank_class[y]) return rank_class[x] < rank_class[y];
    return score[x] > score[y];
  });
  std::vector<int> out(order.begin(), order.begin() + std::clamp(keep, 0, n));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

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

KeptSets expected_attention_stats(const PromptQkv& p, const ModelConfig& c, const Table& mean_rows, const Table& cov_rows,
                                  int budget, const ExpectedAttentionParams& ep) {
  const int d = p.d;
  if (mean_rows.size() != static_cast<size_t>(p.L) * p.Hq || cov_rows.size() != static_cast<size_t>(p.L) * p.Hq * d)
    throw std::invalid_argument("reference: statistics tables of the wrong shape");
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l) {
    std::vector<double> mean, cov;
    for (int h = 0; h < p.Hq; ++h) {
      const auto& m = mean_rows.at(static_cast<size_t>(l) * p.Hq + h);
      mean.insert(mean.end(), m.begin(), m.end());
      for (int a = 0; a < d; ++a) {
        const auto& r = cov_rows.at((static_cast<size_t>(l) * p.Hq + h) * d + a);
        cov.insert(cov.end(), r.begin(), r.end());
      }
    }
    for (int kv = 0; kv < p.Hkv; ++kv) {
      const std::vector<double> score = expected_attention_log_scores(p, c, l, kv, mean, cov, ep);
      std::vector<int> cls(p.S, 1);
      for (int t = 0; t < std::min(ep.n_sink, p.S); ++t) cls[t] = 0;  // the sinks, kept
      out[l].push_back(keep_ranked(cls, score, std::min(budget, p.S)));
    }
  }
  return out;
}

std::vector<std::vector<int>> lukv_counts(const Table& curve, int L, int H, double ratio, int S) {
  if (curve.size() != static_cast<size_t>(99) * L) throw std::invalid_argument("reference: the curve needs 99 x L rows");
  std::vector<std::vector<int>> out(L, std::vector<int>(H, S));
  if (ratio <= 0) return out;
  const int row = std::clamp(static_cast<int>(std::nearbyint(ratio * 100)) - 1, 0, 98);  // Python round: half to even
  for (int l = 0; l < L; ++l) {
    const std::vector<double>& prune = curve.at(static_cast<size_t>(row) * L + l);
    std::vector<double> ideal(H);
    double sum = 0;
    // The press computes the keep rates and counts in float32 (torch), from a float32 curve.
    for (int h = 0; h < H; ++h)
      sum += ideal[h] = std::clamp(1.0f - static_cast<float>(prune.at(h)), 0.0f, 1.0f) * static_cast<float>(S);
    const long long total = std::clamp(static_cast<long long>(std::nearbyint(sum)), static_cast<long long>(H),
                                       static_cast<long long>(H) * S);
    long long floors = 0;
    std::vector<int> base(H);
    for (int h = 0; h < H; ++h) floors += base[h] = static_cast<int>(std::floor(ideal[h]));
    const long long remainder = total - floors;
    std::vector<int> order(H);
    for (int h = 0; h < H; ++h) order[h] = h;
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return ideal[a] - std::floor(ideal[a]) > ideal[b] - std::floor(ideal[b]); });
    for (long long i = 0; i < std::min<long long>(remainder, H); ++i) ++base[order[i]];
    for (int h = 0; h < H; ++h) out[l][h] = std::clamp(base[h], 1, S);
  }
  return out;
}

KeptSets lukv(const PromptQkv& p, const ModelConfig& c, const Table& curve, double ratio, int sink, int window,
              const ExpectedAttentionParams& ep) {
  const std::vector<std::vector<int>> counts = lukv_counts(curve, p.L, p.Hkv, ratio, p.S);
  KeptSets out(p.L);
  for (int l = 0; l < p.L; ++l) {
    std::vector<double> mean, cov;
    query_moments(p, c, l, ep.n_sink, mean, cov);
    for (int kv = 0; kv < p.Hkv; ++kv) {
      std::vector<double> score = expected_attention_log_scores(p, c, l, kv, mean, cov, ep);
      std::vector<int> cls(p.S, 2);
      for (int t = 0; t < std::min(ep.n_sink, p.S); ++t) cls[t] = 1;  // the scorer's sinks: max + 1
      for (int t = 0; t < p.S; ++t)
        if (t < sink || t >= p.S - window) cls[t] = 0;  // LUKV's protected_score, above everything
      for (int t = 0; t < p.S; ++t)
        if (cls[t] < 2) score[t] = 0;  // one score per class: ties by position (the press's stable sort)
      out[l].push_back(keep_ranked(cls, score, counts[l][kv]));
    }
  }
  return out;
}

}  // namespace kvevict::reference
