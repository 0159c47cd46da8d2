// Paired differences: only shared sample keys, the mean difference and its bootstrap interval.
#include <gtest/gtest.h>

#include <cmath>

#include "evals/stats_paired.h"

using namespace kvevict::evals;

TEST(StatsPaired, PairsOnSharedKeysOnly) {
  // Differences a - b on keys k1..k5 (in key order): 5, -10, 0, 20, 15; "only_a" and "only_b" unpaired.
  std::map<std::string, double> a{{"k1", 55}, {"k2", 40}, {"k3", 70}, {"k4", 90}, {"k5", 15}, {"only_a", 100}};
  std::map<std::string, double> b{{"k1", 50}, {"k2", 50}, {"k3", 70}, {"k4", 70}, {"k5", 0}, {"only_b", 0}};
  PairedDifference d = paired_difference(a, b);
  EXPECT_EQ(d.n, 5);
  EXPECT_DOUBLE_EQ(d.mean, 6.0);  // (5 - 10 + 0 + 20 + 15) / 5
  // The bootstrap of {5, -10, 0, 20, 15} from the Python reference (tests/evals/stats_interval_test.cpp).
  EXPECT_NEAR(d.interval.low, -3.0, 1e-9);
  EXPECT_NEAR(d.interval.high, 15.0, 1e-9);
  EXPECT_FALSE(d.significant());  // the interval includes 0
  PairedDifference reverse = paired_difference(b, a);
  EXPECT_DOUBLE_EQ(reverse.mean, -6.0);
}

TEST(StatsPaired, SignificantWhenTheIntervalExcludesZero) {
  std::map<std::string, double> a{{"x", 100}, {"y", 100}, {"z", 100}, {"w", 50}};
  std::map<std::string, double> b{{"x", 0}, {"y", 0}, {"z", 50}, {"w", 0}};
  PairedDifference d = paired_difference(a, b);
  EXPECT_EQ(d.n, 4);
  EXPECT_DOUBLE_EQ(d.mean, 75.0);  // (100 + 100 + 50 + 50) / 4
  EXPECT_GT(d.interval.low, 0);
  EXPECT_TRUE(d.significant());
  // Identical scores: a zero-width interval at 0, not significant.
  PairedDifference same = paired_difference(a, a);
  EXPECT_DOUBLE_EQ(same.interval.low, 0);
  EXPECT_DOUBLE_EQ(same.interval.high, 0);
  EXPECT_FALSE(same.significant());
}

TEST(StatsPaired, NothingSharedIsNoComparison) {
  PairedDifference d = paired_difference({{"a", 1}}, {{"b", 1}});
  EXPECT_EQ(d.n, 0);
  EXPECT_TRUE(std::isnan(d.mean));
  EXPECT_FALSE(d.significant());
}
