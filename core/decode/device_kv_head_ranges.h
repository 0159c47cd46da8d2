#pragma once
// Ranges of rows of several heads of one device cache layer, walked by one kernel launch with one
// thread per row (the row norms, device_kv_row_norms.h, and the position re-assignment,
// device_kv_reassign.h): entry e in [0, out_offset[n_heads]) is row e - out_offset[h] of the range
// of head h, at arena row start_row[h] + (e - out_offset[h]). Plain data, by value in parameters.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_layout.h"

namespace kvevict {

struct DeviceKvHeadRanges {
  int n_heads = 0;
  int64_t start_row[kDeviceKvMaxHeads] = {};       // arena row of head h's first row in the range
  int64_t out_offset[kDeviceKvMaxHeads + 1] = {};  // prefix sums of the ranges' lengths
};

// Rows [first_row[h], first_row[h] + rows[h]) of each head h of `layer`. `what` names the caller in
// errors: std::invalid_argument when the spans do not have one entry per head, std::out_of_range
// when a range leaves its head's length.
inline DeviceKvHeadRanges plan_head_ranges(const DeviceKvLayout& layout, int layer, std::span<const int64_t> first_row,
                                           std::span<const int64_t> rows, const char* what) {
  const DeviceKvLayerLayout& l = layout.layer(layer);
  const size_t n = l.heads.size();
  if (first_row.size() != n || rows.size() != n)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(first_row.size()) + " first rows and " +
                                std::to_string(rows.size()) + " counts for " + std::to_string(n) + " heads");
  DeviceKvHeadRanges r;
  r.n_heads = static_cast<int>(n);
  for (size_t h = 0; h < n; ++h) {
    const DeviceKvRegion& region = l.heads[h];
    if (first_row[h] < 0 || rows[h] < 0 || first_row[h] + rows[h] > region.length)
      throw std::out_of_range(std::string(what) + ": rows [" + std::to_string(first_row[h]) + ", " +
                              std::to_string(first_row[h] + rows[h]) + ") of layer " + std::to_string(layer) +
                              " head " + std::to_string(h) + ", which holds " + std::to_string(region.length));
    r.start_row[h] = region.base_row + first_row[h];
    r.out_offset[h + 1] = r.out_offset[h] + rows[h];
  }
  return r;
}

KVEVICT_HOST_DEVICE inline size_t device_kv_range_rows(const DeviceKvHeadRanges& r) {
  return static_cast<size_t>(r.out_offset[r.n_heads]);
}

// Entry e's head (the last whose offset is <= e, by bisection) and its index within the range.
KVEVICT_HOST_DEVICE inline int device_kv_range_head(const DeviceKvHeadRanges& r, size_t e, int64_t* index) {
  int lo = 0, hi = r.n_heads;  // out_offset[lo] <= e < out_offset[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (static_cast<size_t>(r.out_offset[mid]) <= e) lo = mid; else hi = mid;
  }
  *index = static_cast<int64_t>(e) - r.out_offset[lo];
  return lo;
}

}  // namespace kvevict
