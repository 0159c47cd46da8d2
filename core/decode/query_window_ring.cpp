// See query_window_ring.h.
#include "core/decode/query_window_ring.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvevict {

QueryWindowUpdate QueryWindowRing::plan(int first_position, int n, int capacity) const {
  if (first_position < 0 || n < 0 || capacity < 0)
    throw std::invalid_argument("query window: negative position, count or capacity (" +
                                std::to_string(first_position) + ", " + std::to_string(n) + ", " +
                                std::to_string(capacity) + ")");
  QueryWindowUpdate u;
  if (n == 0 || capacity == 0) {  // nothing to hold from this call: the rows stay
    u.old_rows = rows_;
    return u;
  }
  u.block_rows = std::min(n, capacity);
  u.block_first = n - u.block_rows;
  const bool continues = rows_ > 0 && end_position() == first_position;
  if (continues) {
    u.old_rows = std::min(rows_, capacity - u.block_rows);
    u.old_first = rows_ - u.old_rows;
  }
  return u;
}

QueryWindowUpdate QueryWindowRing::append(int first_position, int n, int capacity) {
  const QueryWindowUpdate u = plan(first_position, n, capacity);
  if (n == 0 || capacity == 0) return u;
  const int end = first_position + n;
  rows_ = u.rows();
  first_position_ = end - rows_;
  return u;
}

bool QueryWindowRing::covers_after(int W, int first_position, int n, int capacity) const {
  if (W <= 0) return false;
  const QueryWindowUpdate u = plan(first_position, n, capacity);
  if (n == 0 || capacity == 0) return false;  // the rows held would not end at the call's end
  // The held rows end at the call's end; they reach back far enough when they number
  // min(W, end): all of a sequence shorter than W, else its last W.
  return u.rows() >= std::min(W, first_position + n);
}

int QueryWindowRing::seed(int W, int first_position, int n, int capacity, int offered_first, int offered_rows) {
  if (W <= 0 || capacity <= 0 || offered_rows <= 0 || offered_first + offered_rows != first_position) return 0;
  if (covers_after(W, first_position, n, capacity)) return 0;
  QueryWindowRing seeded;
  const int keep = std::min(offered_rows, capacity);
  seeded.append(first_position - keep, keep, capacity);
  if (!seeded.covers_after(W, first_position, n, capacity)) return 0;
  *this = seeded;
  return keep;
}

void apply_query_window_update(const QueryWindowUpdate& u, std::vector<float>& held, const float* block,
                               size_t row_floats) {
  const size_t old_first = static_cast<size_t>(u.old_first) * row_floats;
  const size_t old_size = static_cast<size_t>(u.old_rows) * row_floats;
  if (old_first + old_size > held.size())
    throw std::logic_error("query window: the update keeps rows the storage does not hold");
  held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(old_first));
  held.resize(old_size);
  const float* from = block + static_cast<size_t>(u.block_first) * row_floats;
  held.insert(held.end(), from, from + static_cast<size_t>(u.block_rows) * row_floats);
}

}  // namespace kvevict
