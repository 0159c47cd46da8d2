// The iso-quality budget on hand-made grids.
#include <gtest/gtest.h>

#include <cmath>

#include "evals/stats_iso_quality.h"

using namespace kvevict::evals;

TEST(StatsIsoQuality, MonotoneGridInterpolatesLinearlyInKeptFraction) {
  // Full 80, target 0.95 * 80 = 76: between (0.25, 60) and (0.5, 80): 0.25 + (76-60)/(80-60) * 0.25 = 0.45.
  IsoQuality iso = iso_quality_budget({{0.125, 40}, {0.25, 60}, {0.5, 80}, {0.75, 80}}, 80);
  EXPECT_EQ(iso.position, IsoPosition::Inside);
  EXPECT_NEAR(iso.kept_fraction, 0.45, 1e-12);
  EXPECT_EQ(iso_quality_text(iso), "45.0%");
  // Unsorted input gives the same answer.
  IsoQuality shuffled = iso_quality_budget({{0.75, 80}, {0.25, 60}, {0.5, 80}, {0.125, 40}}, 80);
  EXPECT_NEAR(shuffled.kept_fraction, 0.45, 1e-12);
  // The threshold is configurable: 50% of 80 = 40 is met from the smallest point on.
  EXPECT_EQ(iso_quality_budget({{0.125, 40}, {0.25, 60}}, 80, 0.5).position, IsoPosition::BelowSmallest);
}

TEST(StatsIsoQuality, NonMonotoneGridTakesTheFractionAfterWhichTheScoreStaysAbove) {
  // Target 95: met at 0.1, missed at 0.3 (the dip), met again at 0.5 and 0.8. The curve stays above
  // the target only from the crossing between 0.3 (85) and 0.5 (100): 0.3 + (95-85)/(100-85) * 0.2.
  IsoQuality iso = iso_quality_budget({{0.1, 96}, {0.3, 85}, {0.5, 100}, {0.8, 100}}, 100);
  EXPECT_EQ(iso.position, IsoPosition::Inside);
  EXPECT_NEAR(iso.kept_fraction, 0.3 + 10.0 / 15.0 * 0.2, 1e-12);
}

TEST(StatsIsoQuality, OutsideTheMeasuredRangeIsMarked) {
  IsoQuality all_above = iso_quality_budget({{0.125, 99}, {0.25, 100}, {0.5, 100}}, 100);
  EXPECT_EQ(all_above.position, IsoPosition::BelowSmallest);
  EXPECT_DOUBLE_EQ(all_above.kept_fraction, 0.125);
  EXPECT_EQ(iso_quality_text(all_above), "< 12.5%");
  IsoQuality all_below = iso_quality_budget({{0.125, 10}, {0.25, 20}, {0.75, 90}}, 100);
  EXPECT_EQ(all_below.position, IsoPosition::AboveLargest);
  EXPECT_DOUBLE_EQ(all_below.kept_fraction, 0.75);
  EXPECT_EQ(iso_quality_text(all_below), "> 75.0%");
  // A miss at the largest fraction wins over earlier hits (the non-monotone rule).
  EXPECT_EQ(iso_quality_budget({{0.1, 100}, {0.9, 50}}, 100).position, IsoPosition::AboveLargest);
}

TEST(StatsIsoQuality, FullScoreZeroOrNoPointIsUndefined) {
  IsoQuality zero = iso_quality_budget({{0.25, 0}, {0.5, 0}}, 0);
  EXPECT_EQ(zero.position, IsoPosition::Undefined);
  EXPECT_EQ(iso_quality_text(zero), "n/a");
  EXPECT_EQ(iso_quality_budget({}, 100).position, IsoPosition::Undefined);
  EXPECT_EQ(iso_quality_budget({{0.5, 50}}, std::nan("")).position, IsoPosition::Undefined);
}

TEST(StatsIsoQuality, SortKeyOrdersInsideBelowAboveUndefined) {
  IsoQuality below{IsoPosition::BelowSmallest, 0.125};
  IsoQuality inside_small{IsoPosition::Inside, 0.125};
  IsoQuality inside{IsoPosition::Inside, 0.4};
  IsoQuality above{IsoPosition::AboveLargest, 0.1};
  IsoQuality undefined{};
  EXPECT_LT(iso_sort_key(below), iso_sort_key(inside_small));
  EXPECT_LT(iso_sort_key(inside_small), iso_sort_key(inside));
  EXPECT_LT(iso_sort_key(inside), iso_sort_key(above));
  EXPECT_LT(iso_sort_key(above), iso_sort_key(undefined));
}
