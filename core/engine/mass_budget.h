#pragma once
// A budget that is a sort statistic of the scores (policy file `select.layer_allocation: mass`
// with `select.mass: EXPR`): the fewest entries whose scores, sorted descending and normalised to
// sum 1, reach the mass p (CriticalKV / DefensiveKV's "select until the cumulative attention mass
// reaches 90%"). Computed by the engine on the prefill scores, so no DSL program needs a sort.
//
// Scores below 0, NaN and infinities count as 0 (a mass is non-negative); when no candidate has a
// positive score the count is 0. Only the head's candidates (not its protected entries) count.
#include <cstdint>
#include <span>

namespace kvevict {

// min k such that the k largest normalised candidate scores sum to >= p (0 < p <= 1), summed in
// double in descending order; the candidates with a positive score when rounding leaves the sum
// just below p.
int mass_count(std::span<const float> scores, std::span<const int32_t> positions, int protect_first,
               int protect_recent, double p);

}  // namespace kvevict
