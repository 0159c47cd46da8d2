#pragma once
// Iso-quality budget: the smallest kept fraction of the KV cache that keeps at least `threshold`
// (default 0.95) of the full-cache score, from one policy's measured (kept fraction, mean score)
// points on one task. The kept fraction is the measured kept_ratio, not the budget's label.
//
// Rule (it also decides non-monotone curves): the answer is the smallest fraction f such that
// every measured point at or above f meets the target (threshold x full score), i.e. the curve stays
// above the target from f on. A dip below the target at a larger fraction moves f up past the dip.
//  - Between measured points, f is interpolated linearly in kept-fraction space between the last
//    point below the target and the next one. Linear rather than log: for the same two points the
//    linear crossing is never smaller than the log-space one (arithmetic >= geometric mean), so the
//    number never claims a smaller cache than a straight line between two measurements supports.
//  - Every point meets the target: f lies at or below the smallest measured fraction ("< 12.5%").
//  - The largest point misses it: f lies above the largest measured fraction ("> 75.0%").
//  - Full score <= 0 (or no point): undefined ("n/a"): 95% of nothing is met by any cache.
#include <string>
#include <vector>

namespace kvevict::evals {

constexpr double kDefaultIsoThreshold = 0.95;

struct BudgetPoint {
  double kept_fraction = 0;  // measured, in (0, 1]
  double score = 0;          // mean score 0-100
};

enum class IsoPosition { Inside, BelowSmallest, AboveLargest, Undefined };

struct IsoQuality {
  IsoPosition position = IsoPosition::Undefined;
  double kept_fraction = 0;  // Inside: the crossing; BelowSmallest / AboveLargest: that measured bound
};

IsoQuality iso_quality_budget(std::vector<BudgetPoint> points, double full_score,
                              double threshold = kDefaultIsoThreshold);
// "3.2%", "< 12.5%", "> 75.0%" or "n/a".
std::string iso_quality_text(const IsoQuality& iso);
// "inside" | "below_smallest" | "above_largest" | "undefined"
const char* iso_position_name(IsoPosition position);
// Ascending = better: inside and below-smallest by fraction (below-smallest just under its bound),
// above-largest after every fraction, undefined last.
double iso_sort_key(const IsoQuality& iso);

}  // namespace kvevict::evals
