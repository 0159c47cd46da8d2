#pragma once
// The newest post-RoPE query rows of the sequence being run, contiguous in position and at most a
// given number of them: what the window attention of the last W queries reads in a call with fewer
// than W tokens of its own (a decode step, a short later block of a prefill in blocks).
//
// Bookkeeping only. The rows live in the caller's storage, oldest first, as [rows][row floats]:
// host memory (apply_query_window_update below: the engine's RecentQueries, the tests' stand-in of
// the CUDA decoder) or device memory (the CUDA decoder's per-layer copies). Each call's change is a
// QueryWindowUpdate, which the storage carries out for every layer alike.
#include <cstddef>
#include <vector>

namespace kvevict {

// The rows held after a call, oldest first: rows [old_first, old_first + old_rows) of the rows held
// before it, then rows [block_first, block_first + block_rows) of the call's own block.
struct QueryWindowUpdate {
  int old_first = 0, old_rows = 0;
  int block_first = 0, block_rows = 0;
  int rows() const { return old_rows + block_rows; }
};

class QueryWindowRing {
 public:
  // What a call of `n` queries at positions first_position .. first_position + n - 1 changes when at
  // most `capacity` rows are to be held: the rows held carry on when the call continues them (its
  // first position is their end), else the call's rows start over (a new prompt at position 0, a
  // gap, a step back). Nothing changes when n or capacity is 0 (the rows held stay as they are).
  // plan() only tells; append() also makes it the ring's state. std::invalid_argument for negative
  // arguments.
  QueryWindowUpdate plan(int first_position, int n, int capacity) const;
  QueryWindowUpdate append(int first_position, int n, int capacity);

  // Whether, after plan(first_position, n, capacity), the ring would hold the newest min(W,
  // first_position + n) queries of a sequence that started at position 0: the rows the window
  // attention of the last W queries reads (an observer keeps the same rows from the same calls).
  bool covers_after(int W, int first_position, int n, int capacity) const;

  // Starting over from an observer's own rows: when the ring would not cover W after a call of n
  // queries at `first_position` (covers_after) but the newest of the observer's `offered_rows` rows,
  // which end at first_position, would, the ring forgets its rows and holds the newest of those
  // instead; returns how many (their storage must copy that many from the end of the offered
  // rows), 0 when nothing changes.
  int seed(int W, int first_position, int n, int capacity, int offered_first, int offered_rows);

  void forget() { rows_ = first_position_ = 0; }
  int rows() const { return rows_; }
  int first_position() const { return first_position_; }  // of the oldest row held (0 when none)
  int end_position() const { return first_position_ + rows_; }

 private:
  int rows_ = 0, first_position_ = 0;
};

// Carries out `u` on host storage `held` ([rows][row_floats], oldest first) with the call's block
// `block` ([n][row_floats]), in place.
void apply_query_window_update(const QueryWindowUpdate& u, std::vector<float>& held, const float* block,
                               size_t row_floats);

}  // namespace kvevict
