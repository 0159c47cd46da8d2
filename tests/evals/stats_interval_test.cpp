// Intervals against hand-computed values: Wilson from the formula, the fixed-seed bootstrap against
// an independent Python re-implementation, quantiles by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "evals/stats_interval.h"

using namespace kvevict::evals;

TEST(StatsInterval, WilsonMatchesTheFormula) {
  // p = 3/8, z = 1.959963984540054, n = 8:
  //   centre = (p + z^2/2n) / (1 + z^2/n), half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
  // evaluated in Python: [0.13684428582359742, 0.6942576053973727] (textbook: 0.137, 0.694).
  Interval three_of_eight = wilson_interval(3, 8);
  EXPECT_NEAR(three_of_eight.low, 0.13684428582359742, 1e-12);
  EXPECT_NEAR(three_of_eight.high, 0.6942576053973727, 1e-12);
  EXPECT_EQ(three_of_eight.method, IntervalMethod::Wilson);
  // 0/5: the lower bound is 0, the upper z^2/n / (1 + z^2/n) = 0.43448246478317476.
  Interval none = wilson_interval(0, 5);
  EXPECT_DOUBLE_EQ(none.low, 0.0);
  EXPECT_NEAR(none.high, 0.43448246478317476, 1e-12);
  // 5/5 mirrors 0/5.
  Interval all = wilson_interval(5, 5);
  EXPECT_NEAR(all.low, 1 - 0.43448246478317476, 1e-12);
  EXPECT_DOUBLE_EQ(all.high, 1.0);
  EXPECT_TRUE(std::isnan(wilson_interval(0, 0).low));
}

TEST(StatsInterval, QuantileInterpolatesBetweenOrderStatistics) {
  std::vector<double> sorted{1, 2, 4, 8};
  EXPECT_DOUBLE_EQ(sorted_quantile(sorted, 0), 1);
  EXPECT_DOUBLE_EQ(sorted_quantile(sorted, 1), 8);
  EXPECT_DOUBLE_EQ(sorted_quantile(sorted, 0.5), 3);       // at 1.5: halfway between 2 and 4
  EXPECT_DOUBLE_EQ(sorted_quantile(sorted, 0.25), 1.75);   // at 0.75 between 1 and 2
  EXPECT_TRUE(std::isnan(sorted_quantile({}, 0.5)));
}

TEST(StatsInterval, BootstrapWithTheFixedSeedIsReproducible) {
  // Expected from an independent Python implementation of the documented procedure (SplitMix64 from
  // kBootstrapSeed, index = next() % n, 2000 resamples, type-7 quantiles at 2.5% / 97.5%).
  const std::vector<double> values{10, 20, 30, 40, 50, 60, 70, 100};
  Interval interval = bootstrap_mean_interval(values);
  EXPECT_EQ(interval.method, IntervalMethod::Bootstrap);
  EXPECT_NEAR(interval.low, 30.0, 1e-9);
  EXPECT_NEAR(interval.high, 67.5, 1e-9);
  Interval again = bootstrap_mean_interval(values);
  EXPECT_EQ(again.low, interval.low);
  EXPECT_EQ(again.high, interval.high);
  // Values off the 10-point grid, with the fixed seed and with the next one (Python reference):
  // the seed is what fixes the bounds.
  const std::vector<double> uneven{1.3, 2.7, 10.1, 44.4, 91.9, 17.0};
  Interval fixed = bootstrap_mean_interval(uneven);
  EXPECT_NEAR(fixed.low, 5.85, 1e-9);
  EXPECT_NEAR(fixed.high, 56.63333333333333, 1e-9);
  Interval other = bootstrap_mean_interval(uneven, kBootstrapSeed + 1);
  EXPECT_NEAR(other.low, 5.93125, 1e-9);
  EXPECT_NEAR(other.high, 55.48333333333333, 1e-9);
  // Constant values: no spread.
  Interval flat = bootstrap_mean_interval({42, 42, 42});
  EXPECT_DOUBLE_EQ(flat.low, 42);
  EXPECT_DOUBLE_EQ(flat.high, 42);
  EXPECT_TRUE(std::isnan(bootstrap_mean_interval({}).low));
}

TEST(StatsInterval, SummaryPicksWilsonForBinaryCellsAndBootstrapOtherwise) {
  ScoreSummary binary = summarize_scores({100, 0, 0, 100, 0, 0, 100, 0});  // 3 of 8
  EXPECT_EQ(binary.n, 8);
  EXPECT_DOUBLE_EQ(binary.mean, 37.5);
  EXPECT_EQ(binary.interval.method, IntervalMethod::Wilson);
  EXPECT_NEAR(binary.interval.low, 13.684428582359742, 1e-10);
  EXPECT_NEAR(binary.interval.high, 69.42576053973727, 1e-10);
  ScoreSummary partial = summarize_scores({10, 20, 30, 40, 50, 60, 70, 100});
  EXPECT_EQ(partial.interval.method, IntervalMethod::Bootstrap);
  EXPECT_NEAR(partial.interval.low, 30.0, 1e-9);
  EXPECT_NEAR(partial.interval.high, 67.5, 1e-9);
  EXPECT_FALSE(scores_are_binary({0, 50, 100}));
  ScoreSummary empty = summarize_scores({});
  EXPECT_EQ(empty.n, 0);
  EXPECT_TRUE(std::isnan(empty.mean));
}
