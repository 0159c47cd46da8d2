// split_head_budgets (core/engine/head_budgets.h): full heads keep their length, streaming heads
// their protected count, compressed heads share n_c x budget exactly, in proportion to weight.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/engine/head_budgets.h"

namespace kvevict {
namespace {

TEST(HeadBudgets, CompressedHeadsShareTheirBudgetsExactly) {
  const std::vector<HeadPlan> plans = {{HeadMode::Compressed, 1.0}, {HeadMode::Compressed, 2.0}, {HeadMode::Compressed, 3.5},
                                       {HeadMode::Compressed, 0.25}};
  for (int budget : {10, 17, 33, 50}) {
    const auto b = split_head_budgets(budget, plans, {100, 100, 100, 100}, 4);
    EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 4 * budget) << budget;
    for (int x : b) EXPECT_GE(x, 4);
    EXPECT_LT(b[3], b[0]);
    EXPECT_LT(b[0], b[1]);
    EXPECT_LT(b[1], b[2]);
  }
  // Floors first, the rest by weight: 4 + (40 - 16) * w / 6.75 -> 7.56, 11.11, 16.44, 4.89.
  EXPECT_EQ(split_head_budgets(10, plans, {100, 100, 100, 100}, 4), (std::vector<int>{8, 11, 16, 5}));
}

TEST(HeadBudgets, FullAndStreamingHeadsAreOutsideTheBudget) {
  const std::vector<HeadPlan> plans = {{HeadMode::Full, 1}, {HeadMode::Streaming, 1}, {HeadMode::Compressed, 1},
                                       {HeadMode::Compressed, 3}};
  const auto b = split_head_budgets(20, plans, {90, 80, 70, 60}, 6);
  EXPECT_EQ(b[0], 90);
  EXPECT_EQ(b[1], 6);
  EXPECT_EQ(b[2] + b[3], 40);
  EXPECT_EQ(b[2], 6 + 7);   // 6 + 28 / 4
  EXPECT_EQ(b[3], 6 + 21);
}

TEST(HeadBudgets, CapsAndZeroWeights) {
  // A head holding fewer entries than its share gives the rest to the others (water filling).
  const std::vector<HeadPlan> plans = {{HeadMode::Compressed, 1}, {HeadMode::Compressed, 1}};
  EXPECT_EQ(split_head_budgets(30, plans, {10, 100}, 2), (std::vector<int>{10, 50}));
  // More budget than the heads hold: each keeps everything.
  EXPECT_EQ(split_head_budgets(300, plans, {10, 100}, 2), (std::vector<int>{10, 100}));
  // Weights 0 or NaN count as 0; all zero is uniform.
  const std::vector<HeadPlan> zero = {{HeadMode::Compressed, 0}, {HeadMode::Compressed, std::nan("")}};
  EXPECT_EQ(split_head_budgets(20, zero, {100, 100}, 0), (std::vector<int>{20, 20}));
  // Streaming heads shorter than their protected count keep what they have.
  EXPECT_EQ(split_head_budgets(20, {{HeadMode::Streaming, 1}}, {5}, 8), (std::vector<int>{5}));
  EXPECT_THROW(split_head_budgets(20, plans, {1}, 0), std::logic_error);
}

TEST(HeadBudgets, ModeValues) {
  EXPECT_EQ(head_mode_from_value(0), HeadMode::Compressed);
  EXPECT_EQ(head_mode_from_value(1), HeadMode::Full);
  EXPECT_EQ(head_mode_from_value(2), HeadMode::Streaming);
  EXPECT_EQ(head_mode_from_value(7), HeadMode::Compressed);
  EXPECT_EQ(head_mode_from_value(std::nan("")), HeadMode::Compressed);
}

}  // namespace
}  // namespace kvevict
