#include "evals/stats_iso_quality.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvevict::evals {

IsoQuality iso_quality_budget(std::vector<BudgetPoint> points, double full_score, double threshold) {
  IsoQuality iso;
  if (points.empty() || !(full_score > 0)) return iso;  // NaN full score included
  std::stable_sort(points.begin(), points.end(),
                   [](const BudgetPoint& a, const BudgetPoint& b) { return a.kept_fraction < b.kept_fraction; });
  const double target = threshold * full_score;
  // The last point below the target; everything after it meets the target.
  size_t last_miss = points.size();
  for (size_t i = 0; i < points.size(); ++i) {
    if (points[i].score < target) last_miss = i;
  }
  if (last_miss == points.size()) {
    iso.position = IsoPosition::BelowSmallest;
    iso.kept_fraction = points.front().kept_fraction;
  } else if (last_miss + 1 == points.size()) {
    iso.position = IsoPosition::AboveLargest;
    iso.kept_fraction = points.back().kept_fraction;
  } else {
    const BudgetPoint& below = points[last_miss];
    const BudgetPoint& above = points[last_miss + 1];  // above.score >= target > below.score
    const double t = (target - below.score) / (above.score - below.score);
    iso.position = IsoPosition::Inside;
    iso.kept_fraction = below.kept_fraction + t * (above.kept_fraction - below.kept_fraction);
  }
  return iso;
}

std::string iso_quality_text(const IsoQuality& iso) {
  if (iso.position == IsoPosition::Undefined) return "n/a";
  char text[48];
  const char* mark = iso.position == IsoPosition::BelowSmallest ? "< " : iso.position == IsoPosition::AboveLargest ? "> " : "";
  std::snprintf(text, sizeof(text), "%s%.1f%%", mark, iso.kept_fraction * 100);
  return text;
}

const char* iso_position_name(IsoPosition position) {
  switch (position) {
    case IsoPosition::Inside: return "inside";
    case IsoPosition::BelowSmallest: return "below_smallest";
    case IsoPosition::AboveLargest: return "above_largest";
    case IsoPosition::Undefined: break;
  }
  return "undefined";
}

double iso_sort_key(const IsoQuality& iso) {
  switch (iso.position) {
    case IsoPosition::Inside: return iso.kept_fraction;
    case IsoPosition::BelowSmallest: return iso.kept_fraction - 1e-9;
    case IsoPosition::AboveLargest: return 10 + iso.kept_fraction;
    case IsoPosition::Undefined: break;
  }
  return 100;
}

}  // namespace kvevict::evals
