#pragma once
// The row norms of a device cache layer's entries (row_norms.h), for a host cache whose heads hold
// positions only (KVCache::append_position): the key_norm and value_norm signals then come from
// the device instead of from rows that are not on the host. One kernel per layer
// (core/decode/cuda/device_kv_cache.cu, DeviceKvCache::row_norms) over every requested head's
// range of rows; DeviceKvTwin runs the same element body on the CPU.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/decode/device_kv_head_ranges.h"
#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/row_norms.h"

namespace kvevict {

// The rows of `ranges` (device_kv_head_ranges.h); output row e is written to key_norms[e] and
// value_norms[e]. Travels by value (under the 4 KiB parameter limit).
struct DeviceKvRowNormArgs {
  const void* keys = nullptr;
  const void* values = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0;
  DeviceKvHeadRanges ranges;
  float* key_norms = nullptr;
  float* value_norms = nullptr;
};

// The arguments for rows [first_row[h], first_row[h] + rows[h]) of each head of `layer` in `layout`,
// over the given arenas and outputs (device or host pointers alike). std::out_of_range when a range
// leaves its head's length, std::invalid_argument when the spans do not have one entry per head.
inline DeviceKvRowNormArgs plan_row_norms(const DeviceKvLayout& layout, int layer, std::span<const int64_t> first_row,
                                          std::span<const int64_t> rows, const void* keys, const void* values,
                                          float* key_norms, float* value_norms) {
  DeviceKvRowNormArgs a;
  a.keys = keys;
  a.values = values;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.ranges = plan_head_ranges(layout, layer, first_row, rows, "device KV row norms");
  a.key_norms = key_norms;
  a.value_norms = value_norms;
  return a;
}

KVEVICT_HOST_DEVICE inline size_t device_kv_row_norm_elements(const DeviceKvRowNormArgs& a) {
  return device_kv_range_rows(a.ranges);
}

// Arena row `row`'s key and value norms from the stored words, converted as the host cache converts
// them (device_kv_load).
KVEVICT_HOST_DEVICE inline RowNorms device_kv_row_norms_at(const void* keys, const void* values, KvType type,
                                                          int64_t row, int head_dim) {
  RowNorms n;
  n.key = l2_row_norm([&](int i) { return device_kv_load(keys, type, row, head_dim, i); }, head_dim);
  n.value = l2_row_norm([&](int i) { return device_kv_load(values, type, row, head_dim, i); }, head_dim);
  return n;
}

// Output row e of head ranges `r` (its head's range, then its row) into key_norms[e] and
// value_norms[e]: the body of this file's kernel and of the norms handed to device scoring
// (cache_rows_signal.h).
KVEVICT_HOST_DEVICE inline void device_kv_range_row_norms(const DeviceKvHeadRanges& r, const void* keys,
                                                          const void* values, KvType type, int head_dim, size_t e,
                                                          float* key_norms, float* value_norms) {
  int64_t index = 0;
  const int h = device_kv_range_head(r, e, &index);
  const RowNorms n = device_kv_row_norms_at(keys, values, type, r.start_row[h] + index, head_dim);
  key_norms[e] = n.key;
  value_norms[e] = n.value;
}

KVEVICT_HOST_DEVICE inline void device_kv_row_norm_element(const DeviceKvRowNormArgs& a, size_t e) {
  device_kv_range_row_norms(a.ranges, a.keys, a.values, a.type, a.head_dim, e, a.key_norms, a.value_norms);
}

}  // namespace kvevict
