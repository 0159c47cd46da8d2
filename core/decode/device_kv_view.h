#pragma once
// One layer of a device-resident KV cache as the kernels that READ it see it (attention, column
// sums, scoring): plain data passed to a kernel by value, so a launch uploads nothing per call.
// Built on the host from the layer's layout (device_kv_layout.h) and its arenas' pointers; over
// host arenas (DeviceKvTwin) the same struct feeds the CPU twins of those kernels.
//
// Rows: stored head h's live entries are arena rows [base_row[h], base_row[h] + length[h]), in
// cache order; a key (value) row is head_dim elements of `type`; positions are one int32 per row.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_elements.h"
#include "core/decode/device_kv_layout.h"

namespace kvevict {

struct DeviceKvLayerView {
  const void* keys = nullptr;          // post-RoPE keys
  const void* values = nullptr;
  const int32_t* positions = nullptr;  // original positions
  int n_heads = 0;                     // stored heads of the layer
  int head_dim = 0;
  KvType type = KvType::F16;
  int64_t base_row[kDeviceKvMaxHeads] = {};
  int64_t length[kDeviceKvMaxHeads] = {};
};

// Element i of row `row` of a key or value arena, as f32 (the host KVCache's conversion).
KVEVICT_HOST_DEVICE inline float device_kv_load(const void* arena, KvType type, int64_t row, int head_dim, int i) {
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(head_dim) + static_cast<size_t>(i);
  if (type == KvType::F32) return static_cast<const float*>(arena)[at];
  const uint16_t w = static_cast<const uint16_t*>(arena)[at];
  return type == KvType::F16 ? kv_scalar::f16_to_f32(w) : kv_scalar::bf16_to_f32(w);
}

// The view of `layout` over the given arenas (device or host pointers alike). std::invalid_argument
// for more than kDeviceKvMaxHeads heads (the view holds per-head data by value).
inline DeviceKvLayerView make_layer_view(const DeviceKvLayerLayout& layout, const DeviceKvGeometry& geometry,
                                         const void* keys, const void* values, const int32_t* positions) {
  if (layout.heads.size() > static_cast<size_t>(kDeviceKvMaxHeads))
    throw std::invalid_argument("device KV view: " + std::to_string(layout.heads.size()) + " heads; at most " +
                                std::to_string(kDeviceKvMaxHeads));
  DeviceKvLayerView v;
  v.keys = keys;
  v.values = values;
  v.positions = positions;
  v.n_heads = static_cast<int>(layout.heads.size());
  v.head_dim = geometry.head_dim;
  v.type = geometry.type;
  for (int h = 0; h < v.n_heads; ++h) {
    v.base_row[h] = layout.heads[static_cast<size_t>(h)].base_row;
    v.length[h] = layout.heads[static_cast<size_t>(h)].length;
  }
  return v;
}

}  // namespace kvevict
