#include "core/engine/staged_selection.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/engine/selection.h"

namespace kvevict {

namespace {

// The DSL evaluates settings in float32 (0.7 arrives as 0.69999999); rounding to 6 decimals
// recovers the decimal the file wrote, so a product with it is the double one kvpress takes.
double as_written(double fraction) { return std::round(std::min(fraction, 1.0) * 1e6) / 1e6; }

}  // namespace

int stage_keep_count(int length, double keep, int budget, bool last) {
  const double k = as_written(keep);
  const double want = keep > 0 ? std::floor(k * length) : static_cast<double>(budget);
  const double capped = last ? std::min(want, static_cast<double>(budget)) : want;
  return std::clamp(static_cast<int>(std::min(capped, 1e9)), 0, std::max(0, length));
}

std::vector<int> select_shares(const std::vector<std::span<const float>>& stage_scores, std::span<const int32_t> positions,
                               const std::vector<double>& shares, int budget, int protect_first, int protect_recent,
                               bool score_order) {
  const int T = static_cast<int>(positions.size());
  if (stage_scores.size() != shares.size() || stage_scores.empty())
    throw std::invalid_argument("select_shares: one share per stage");
  for (const auto& s : stage_scores)
    if (static_cast<int>(s.size()) != T) throw std::invalid_argument("select_shares: scores/positions size mismatch");
  budget = std::max(0, budget);
  std::vector<int> prot = protected_indices(positions, protect_first, protect_recent);
  std::vector<char> taken(T, 0);
  for (int i : prot) taken[i] = 1;  // every protected entry is out of the candidates, kept or not
  const int candidates_total = T - static_cast<int>(prot.size());
  if (static_cast<int>(prot.size()) > budget) prot.resize(budget);  // sinks first, then newest
  const int free = std::min(budget - static_cast<int>(prot.size()), candidates_total);
  std::vector<int> kept;
  int left = std::max(0, free);
  for (size_t i = 0; i < stage_scores.size() && left > 0; ++i) {
    const bool last = i + 1 == stage_scores.size();
    const int n = last ? left : std::min(left, static_cast<int>(std::floor(as_written(shares[i]) * free)));
    std::vector<int> candidates;
    for (int t = 0; t < T; ++t)
      if (!taken[t]) candidates.push_back(t);
    const std::vector<int> top = top_k_indices(stage_scores[i], positions, candidates, n);
    for (int t : top) taken[t] = 1;
    kept.insert(kept.end(), top.begin(), top.end());
    left -= static_cast<int>(top.size());
  }
  auto by_position = [&](int a, int b) { return positions[a] < positions[b]; };
  std::sort(prot.begin(), prot.end(), by_position);
  kept.insert(kept.end(), prot.begin(), prot.end());
  if (!score_order) std::sort(kept.begin(), kept.end(), by_position);
  return kept;
}

}  // namespace kvevict
