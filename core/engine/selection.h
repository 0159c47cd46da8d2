#pragma once
// Which cache entries of a head survive, given one score per entry (higher = keep).
//
// Protected entries: positions < protect_first, and the protect_recent entries with the largest
// positions. They count inside the budget; if the budget is smaller than the protected set, the
// protected entries are kept by priority: sinks in ascending position, then recent ones newest first.
// The free budget (budget - protected) is split into n_random = floor(random_share * free) sampled
// entries and n_top = free - n_random top-k entries.
//
// Deterministic tie rule (top-k and every ranking here): higher score first, then smaller original
// position first. NaN scores rank below every number.
//
// Random share (NACL): sampling without replacement from softmax(score / temperature) over the
// candidates top-k did not take, by Gumbel-top-k: key = score / T + Gumbel(u), u the Philox draw of
// (seed, layer, kv_head, position); the n_random largest keys are an exact sample without replacement
// and, being per-entry, the result does not depend on cache order. Same seed -> same result.
//
// kept order: positional (ascending original position) or score (top-k by rank, then sampled entries
// by key, then protected entries by position).
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace kvevict {

// The tie rule as a strict order: entry a (score, position) ranks before entry b.
inline bool ranks_before(float sa, int32_t pa, float sb, int32_t pb) {
  const bool na = std::isnan(sa), nb = std::isnan(sb);
  if (na != nb) return nb;
  if (!na && sa != sb) return sa > sb;
  return pa < pb;
}

struct HeadSelectionSpec {
  int budget = 0;
  int protect_first = 0;
  int protect_recent = 0;
  double random_share = 0.0;
  double temperature = 1.0;
  bool score_order = false;
  uint64_t seed = 0;
  int layer = 0, kv_head = 0;
};

// Cache indices of the protected entries of a head (priority order as described above).
std::vector<int> protected_indices(std::span<const int32_t> positions, int protect_first, int protect_recent);

// Ranks `candidates` (cache indices) by score with the tie rule; returns the first k, in rank order,
// or with `ranked` false the same k in no particular order (a partition: O(T) instead of O(T log k),
// for a caller that orders them otherwise; the tie rule is a total order on distinct positions).
std::vector<int> top_k_indices(std::span<const float> scores, std::span<const int32_t> positions,
                               std::vector<int> candidates, int k, bool ranked = true);

// The kept cache indices of one head (all of them when budget >= length).
std::vector<int> select_head(std::span<const float> scores, std::span<const int32_t> positions,
                             const HeadSelectionSpec& spec);

// Ada-KV layer scope. Each head h keeps its protected entries plus a share of the layer's free
// budget: the top sum_h(free_h) candidate scores over all heads jointly (tie rule, then lower head)
// give counts n_h; head h gets n_h * (1 - floor_alpha) + floor_alpha * free_h, rounded by largest
// remainder to the exact total and capped at its candidates; then top-k within the head.
// `budget[h]` counts the protected entries. Returns kept cache indices per head.
std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                    const std::vector<std::span<const int32_t>>& positions,
                                                    const std::vector<int>& budget, int protect_first,
                                                    int protect_recent, double floor_alpha, bool score_order);

}  // namespace kvevict
