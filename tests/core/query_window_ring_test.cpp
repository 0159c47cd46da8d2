// QueryWindowRing (core/decode/query_window_ring.h): the newest queries of a sequence, contiguous in
// position, as the CUDA decoder holds them on the device and the engine on the host. Checked
// against a plain reference: every row a sequence ever had, from which the newest are cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/decode/query_window_ring.h"

namespace kvevict {
namespace {

// Row at position p of sequence s: two floats that name it.
std::vector<float> rows_of(int sequence, int first, int n) {
  std::vector<float> out;
  for (int p = first; p < first + n; ++p) {
    out.push_back(static_cast<float>(sequence));
    out.push_back(static_cast<float>(p));
  }
  return out;
}

TEST(QueryWindowRing, DecodeStepsCarryTheNewestRowsOn) {
  QueryWindowRing ring;
  std::vector<float> held;
  apply_query_window_update(ring.append(0, 10, 4), held, rows_of(0, 0, 10).data(), 2);
  EXPECT_EQ(ring.rows(), 4);
  EXPECT_EQ(ring.first_position(), 6);
  EXPECT_EQ(held, rows_of(0, 6, 4));
  for (int p = 10; p < 15; ++p) apply_query_window_update(ring.append(p, 1, 4), held, rows_of(0, p, 1).data(), 2);
  EXPECT_EQ(ring.first_position(), 11);
  EXPECT_EQ(held, rows_of(0, 11, 4));
  // A short block continues too: two old rows and its two.
  apply_query_window_update(ring.append(15, 2, 4), held, rows_of(0, 15, 2).data(), 2);
  EXPECT_EQ(held, rows_of(0, 13, 4));
}

TEST(QueryWindowRing, ANewPromptAGapOrAStepBackStartsOver) {
  for (const int first : {0, 7, 20}) {  // held rows end at 12: a new prompt, a step back, a gap
    QueryWindowRing ring;
    std::vector<float> held;
    apply_query_window_update(ring.append(0, 12, 8), held, rows_of(0, 0, 12).data(), 2);
    apply_query_window_update(ring.append(first, 3, 8), held, rows_of(1, first, 3).data(), 2);
    EXPECT_EQ(ring.rows(), 3) << first;
    EXPECT_EQ(ring.first_position(), first) << first;
    EXPECT_EQ(held, rows_of(1, first, 3)) << first;
  }
}

TEST(QueryWindowRing, CoversOnlyTheNewestRowsOfASequenceFromPositionZero) {
  QueryWindowRing ring;
  EXPECT_TRUE(ring.covers_after(4, 0, 6, 4));
  EXPECT_TRUE(ring.covers_after(8, 0, 6, 8)) << "a prompt shorter than W: all of it";
  EXPECT_FALSE(ring.covers_after(8, 0, 6, 4)) << "room for fewer than W";
  EXPECT_FALSE(ring.covers_after(4, 6, 1, 4)) << "a decode step with nothing held";
  ring.append(0, 6, 4);
  EXPECT_TRUE(ring.covers_after(4, 6, 1, 4));
  EXPECT_FALSE(ring.covers_after(4, 7, 1, 4)) << "a gap";
  EXPECT_FALSE(ring.covers_after(0, 6, 1, 4));
  QueryWindowRing late;  // started at a gap (after a restore that brought no rows)
  late.append(100, 1, 4);
  EXPECT_FALSE(late.covers_after(4, 101, 1, 4));
  late.append(101, 1, 4);
  late.append(102, 1, 4);
  EXPECT_TRUE(late.covers_after(4, 103, 1, 4)) << "four rows since the gap are the newest four";
  EXPECT_THROW(ring.plan(-1, 1, 4), std::invalid_argument);
  EXPECT_THROW(ring.plan(0, -1, 4), std::invalid_argument);
}

TEST(QueryWindowRing, NothingToHoldLeavesTheRowsAsTheyAre) {
  QueryWindowRing ring;
  std::vector<float> held;
  apply_query_window_update(ring.append(0, 5, 3), held, rows_of(0, 0, 5).data(), 2);
  const std::vector<float> before = held;
  apply_query_window_update(ring.append(5, 0, 3), held, nullptr, 2);
  apply_query_window_update(ring.append(5, 4, 0), held, rows_of(0, 5, 4).data(), 2);
  EXPECT_EQ(held, before);
  EXPECT_EQ(ring.end_position(), 5);
  QueryWindowUpdate wrong;
  wrong.old_rows = 9;
  EXPECT_THROW(apply_query_window_update(wrong, held, nullptr, 2), std::logic_error);
}

// Random calls (prompts, blocks, steps, gaps, changing capacities) against the reference: the rows
// held are always the newest min(capacity, run) rows of the current contiguous run.
// Starting over from an observer's own rows (NACL's window, first asked for while decoding): only
// when the ring would not cover the window after the call, the offered rows end where the call
// begins and their newest (at most the capacity) would cover it.
TEST(QueryWindowRing, SeedsFromTheObserversRowsOnlyWhereThatCovers) {
  QueryWindowRing ring;
  EXPECT_EQ(ring.seed(8, 100, 1, 8, 50, 50), 8) << "the newest 8 (the capacity) of the 50 offered";
  EXPECT_EQ(ring.first_position(), 92);
  EXPECT_EQ(ring.end_position(), 100);
  EXPECT_TRUE(ring.covers_after(8, 100, 1, 8));
  EXPECT_EQ(ring.seed(8, 100, 1, 8, 50, 50), 0) << "it covers already: nothing changes";
  EXPECT_EQ(ring.first_position(), 92);
  QueryWindowRing empty;
  EXPECT_EQ(empty.seed(8, 100, 1, 8, 50, 49), 0) << "the offered rows end before the call";
  EXPECT_EQ(empty.seed(8, 100, 1, 8, 96, 4), 0) << "4 offered + 1 own do not reach back 8";
  EXPECT_EQ(empty.rows(), 0);
  EXPECT_EQ(empty.seed(8, 100, 1, 0, 50, 50), 0) << "no capacity";
  EXPECT_EQ(empty.seed(0, 100, 1, 8, 50, 50), 0) << "no window";
  EXPECT_EQ(empty.seed(8, 5, 1, 8, 0, 5), 5) << "a sequence shorter than the window: all of it";
  EXPECT_TRUE(empty.covers_after(8, 5, 1, 8));
}

TEST(QueryWindowRing, MatchesAReferenceOverRandomCalls) {
  std::mt19937 rng(7);
  QueryWindowRing ring;
  std::vector<float> held;
  int sequence = 0, next = 0, run_start = 0;
  for (int call = 0; call < 3000; ++call) {
    const int kind = static_cast<int>(rng() % 10);
    int first = next, n = 1 + static_cast<int>(rng() % 3);
    if (kind == 0) {  // a new prompt
      ++sequence;
      first = 0;
      n = 1 + static_cast<int>(rng() % 40);
    } else if (kind == 1) {  // a gap or a step back (a restore): other rows at those positions
      first = static_cast<int>(rng() % 60);
      if (first != next) ++sequence;
    } else if (kind == 2) {
      n = 1 + static_cast<int>(rng() % 20);
    }
    const int capacity = 1 + static_cast<int>(rng() % 16);
    if (first != next || first == 0) run_start = first;
    apply_query_window_update(ring.append(first, n, capacity), held, rows_of(sequence, first, n).data(), 2);
    next = first + n;
    // The reference: the last min(capacity, run length, rows held before + n) rows of the run. The
    // ring never holds more than the previous capacity allowed, so compare against what it holds.
    const int rows = ring.rows();
    ASSERT_LE(rows, capacity);
    ASSERT_LE(rows, next - run_start);
    ASSERT_GE(rows, std::min(capacity, n));
    ASSERT_EQ(ring.end_position(), next);
    ASSERT_EQ(held, rows_of(sequence, next - rows, rows)) << "call " << call;
  }
}

}  // namespace
}  // namespace kvevict
