#pragma once
// The row norms of a device cache layer's entries (row_norms.h), for a host cache whose heads hold
// positions only (KVCache::append_position): the key_norm and value_norm signals then come from
// the device instead of from rows that are not on the host. One kernel per layer
// (core/decode/cuda/device_kv_cache.cu, DeviceKvCache::row_norms) over every requested head's
// range of rows; DeviceKvTwin runs the same element body on the CPU.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/row_norms.h"

namespace kvevict {

// Rows [first_row[h], first_row[h] + count) of head h, for every head h of the layer, where count =
// out_offset[h + 1] - out_offset[h]; output row e (in [0, out_offset[n_heads])) is written to
// key_norms[e] and value_norms[e]. Travels by value (under the 4 KiB parameter limit).
struct DeviceKvRowNormArgs {
  const void* keys = nullptr;
  const void* values = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0;
  int n_heads = 0;
  int64_t start_row[kDeviceKvMaxHeads] = {};       // arena row of head h's first requested row
  int64_t out_offset[kDeviceKvMaxHeads + 1] = {};  // prefix sums of the requested counts
  float* key_norms = nullptr;
  float* value_norms = nullptr;
};

// The arguments for rows [first_row[h], first_row[h] + rows[h]) of each head of `layer` in `layout`,
// over the given arenas and outputs (device or host pointers alike). std::out_of_range when a range
// leaves its head's length, std::invalid_argument when the spans do not have one entry per head.
inline DeviceKvRowNormArgs plan_row_norms(const DeviceKvLayout& layout, int layer, std::span<const int64_t> first_row,
                                          std::span<const int64_t> rows, const void* keys, const void* values,
                                          float* key_norms, float* value_norms) {
  const DeviceKvLayerLayout& l = layout.layer(layer);
  const size_t n = l.heads.size();
  if (first_row.size() != n || rows.size() != n)
    throw std::invalid_argument("device KV row norms: " + std::to_string(first_row.size()) + " first rows and " +
                                std::to_string(rows.size()) + " counts for " + std::to_string(n) + " heads");
  DeviceKvRowNormArgs a;
  a.keys = keys;
  a.values = values;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.n_heads = static_cast<int>(n);
  a.key_norms = key_norms;
  a.value_norms = value_norms;
  for (size_t h = 0; h < n; ++h) {
    const DeviceKvRegion& r = l.heads[h];
    if (first_row[h] < 0 || rows[h] < 0 || first_row[h] + rows[h] > r.length)
      throw std::out_of_range("device KV row norms: rows [" + std::to_string(first_row[h]) + ", " +
                              std::to_string(first_row[h] + rows[h]) + ") of layer " + std::to_string(layer) +
                              " head " + std::to_string(h) + ", which holds " + std::to_string(r.length));
    a.start_row[h] = r.base_row + first_row[h];
    a.out_offset[h + 1] = a.out_offset[h] + rows[h];
  }
  return a;
}

KVEVICT_HOST_DEVICE inline size_t device_kv_row_norm_elements(const DeviceKvRowNormArgs& a) {
  return static_cast<size_t>(a.out_offset[a.n_heads]);
}

// Output row e: its head (the last whose offset is <= e, by bisection), then the key's and the
// value's norm from the stored words, converted as the host cache converts them (device_kv_load).
KVEVICT_HOST_DEVICE inline void device_kv_row_norm_element(const DeviceKvRowNormArgs& a, size_t e) {
  int lo = 0, hi = a.n_heads;  // out_offset[lo] <= e < out_offset[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (static_cast<size_t>(a.out_offset[mid]) <= e) lo = mid; else hi = mid;
  }
  const int64_t row = a.start_row[lo] + (static_cast<int64_t>(e) - a.out_offset[lo]);
  a.key_norms[e] = l2_row_norm([&](int i) { return device_kv_load(a.keys, a.type, row, a.head_dim, i); }, a.head_dim);
  a.value_norms[e] = l2_row_norm([&](int i) { return device_kv_load(a.values, a.type, row, a.head_dim, i); }, a.head_dim);
}

}  // namespace kvevict
