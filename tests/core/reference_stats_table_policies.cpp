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

std::vector<double> lukv_scores(const PromptQkv& p, const ModelConfig& c, int l, int kv, const ExpectedAttentionParams& ep) {
  std::vector<double> mean, cov;
  query_moments(p, c, l, ep.n_sink, mean, cov);
  return expected_attention_log_scores(p, c, l, kv, mean, cov, ep);
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
