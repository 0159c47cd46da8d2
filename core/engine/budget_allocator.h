#pragma once
// Integer budgets that add up exactly. Every item i gets a floor `lower[i]` first (e.g. its
// protected tokens, which count inside the budget); the rest of `total` is split in proportion to
// `weight[i]`, each item capped at `upper[i]` (what it can hold) with the excess redistributed over
// the uncapped items (water filling); the fractional shares are rounded by largest remainder, ties
// (remainders within 1e-6 of a token, relative to the share) to the lower index. Result: lower[i] <= out[i] <= upper[i] and sum(out) == total whenever
// sum(lower) <= total <= sum(upper); above sum(upper) every item gets upper[i]; below sum(lower)
// the floors are dropped (every lower[i] treated as 0) so that the sum is still exact.
// Weights that are negative, NaN or infinite count as 0; when every active weight is 0 the split
// is uniform. This is CAKE's split (window tokens per layer + proportional non-window share) and
// the uniform/pyramid splits alike.
#include <cstdint>
#include <vector>

namespace kvevict {

std::vector<int64_t> allocate_budgets(const std::vector<double>& weight, const std::vector<int64_t>& lower,
                                      const std::vector<int64_t>& upper, int64_t total);

// Convenience: no floors.
std::vector<int64_t> allocate_budgets(const std::vector<double>& weight, const std::vector<int64_t>& upper,
                                      int64_t total);

}  // namespace kvevict
