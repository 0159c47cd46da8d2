// Budgets add up exactly, respect floors and caps, and follow the weights up to rounding.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/engine/budget.h"
#include "core/engine/budget_allocator.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

TEST(Budget, ParsesTheThreeForms) {
  EXPECT_EQ(Budget::parse("full").kind, Budget::Kind::Full);
  const Budget f = Budget::parse("10%");
  EXPECT_EQ(f.kind, Budget::Kind::Fraction);
  EXPECT_DOUBLE_EQ(f.tokens_per_head(1000), 100.0);
  const Budget t = Budget::parse("128");
  EXPECT_EQ(t.kind, Budget::Kind::TokensPerHead);
  EXPECT_DOUBLE_EQ(t.tokens_per_head(1000), 128.0);
  EXPECT_DOUBLE_EQ(t.tokens_per_head(100), 100.0);  // never above the prompt
  EXPECT_DOUBLE_EQ(Budget::parse("full").tokens_per_head(77), 77.0);
}

TEST(Budget, RejectsBadTextWithUsageError) {
  for (const char* bad : {"", "0", "-3", "0%", "101%", "abc", "12x", "%", " 5", "nan", "inf"}) {
    try {
      Budget::parse(bad, "--budget");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--budget"), std::string::npos) << e.what();
      EXPECT_EQ(e.exit_code(), 2);
    }
  }
  EXPECT_THROW(Budget::parse("600").check_prompt(500), UsageError);
  EXPECT_NO_THROW(Budget::parse("500").check_prompt(500));
}

TEST(BudgetAllocator, AddsUpExactlyForManyRandomCases) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<double> w(n);
    std::vector<int64_t> lo(n), hi(n);
    for (int i = 0; i < n; ++i) {
      w[i] = (rng() % 5 == 0) ? 0.0 : std::uniform_real_distribution<double>(0.0, 10.0)(rng);
      hi[i] = rng() % 300;
      lo[i] = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 20);
    }
    const int64_t sum_hi = std::accumulate(hi.begin(), hi.end(), int64_t{0});
    const int64_t total = static_cast<int64_t>(rng() % (sum_hi + 50));
    const auto b = allocate_budgets(w, lo, hi, total);
    ASSERT_EQ(static_cast<int>(b.size()), n);
    const int64_t sum = std::accumulate(b.begin(), b.end(), int64_t{0});
    EXPECT_EQ(sum, std::min(total, sum_hi)) << "trial " << trial;
    int64_t sum_lo = 0;
    for (int i = 0; i < n; ++i) sum_lo += std::min(lo[i], hi[i]);
    for (int i = 0; i < n; ++i) {
      EXPECT_LE(b[i], hi[i]);
      EXPECT_GE(b[i], 0);
      if (total >= sum_lo) {
        EXPECT_GE(b[i], std::min(lo[i], hi[i])) << "trial " << trial;
      }
    }
  }
}

TEST(BudgetAllocator, UncappedSharesAreWithinOneOfTheExactProportion) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    std::vector<double> w(n);
    for (double& v : w) v = std::uniform_real_distribution<double>(0.1, 5.0)(rng);
    const double wsum = std::accumulate(w.begin(), w.end(), 0.0);
    const int64_t total = 1 + rng() % 5000;
    const auto b = allocate_budgets(w, std::vector<int64_t>(n, 1 << 20), total);
    for (int i = 0; i < n; ++i) EXPECT_LT(std::abs(b[i] - w[i] / wsum * total), 1.0);
  }
}

TEST(BudgetAllocator, CapsRedistributeTheExcess) {
  // Layer 0 wants 90% of 100 but holds 20: the other 80 go to layers 1 and 2 in proportion 1:3.
  const auto b = allocate_budgets({9.0, 0.25, 0.75}, {20, 1000, 1000}, 100);
  EXPECT_EQ(b, (std::vector<int64_t>{20, 20, 60}));
}

TEST(BudgetAllocator, UniformWhenAllWeightsZeroAndLargestRemainderTiesToLowerIndex) {
  EXPECT_EQ(allocate_budgets({0, 0, 0}, {10, 10, 10}, 7), (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(allocate_budgets({1, 1, 1, 1}, {10, 10, 10, 10}, 6), (std::vector<int64_t>{2, 2, 1, 1}));
  // NaN and negative weights count as zero.
  EXPECT_EQ(allocate_budgets({std::nan(""), -1.0, 2.0}, {10, 10, 10}, 5), (std::vector<int64_t>{0, 0, 5}));
}

TEST(BudgetAllocator, FloorsFirstThenProportionalRest) {
  // CAKE: each layer keeps its window (floor 4); the rest 88 split 1:3.
  EXPECT_EQ(allocate_budgets({1.0, 3.0}, {4, 4}, {1000, 1000}, 96), (std::vector<int64_t>{26, 70}));
  // Below the floors: floors dropped, the sum stays exact.
  const auto b = allocate_budgets({1.0, 1.0}, {10, 10}, {1000, 1000}, 5);
  EXPECT_EQ(b[0] + b[1], 5);
}

}  // namespace
}  // namespace kvevict
