#pragma once
// Position re-assignment on a device cache (StreamingLLM's reassign_in_cache; KVCache::
// reassign_positions is the host's): entry t of a listed head gets position t and its key is
// rotated back from its old position and forward to t, in f32, rounded once to the cache's KvType
// when stored. Entries already at their index are not touched. One kernel per layer over every
// listed head's rows (core/decode/cuda/device_kv_cache.cu); DeviceKvTwin runs the same element body
// on the CPU. The rotation is rope_rerotate_pair over the host Rope's table (rope.h), so the kernel
// and the twin give the host cache's bits; the table must cover every old position and every new index (the
// host KVCache reserves it before it re-assigns).
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/device_kv_head_ranges.h"
#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/rope.h"

namespace kvevict {

// Rows [0, length) of each listed head (the others: none), as ranges (device_kv_head_ranges.h).
// Travels by value (under the 4 KiB parameter limit).
struct DeviceKvReassignArgs {
  void* keys = nullptr;
  int32_t* positions = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0;
  DeviceKvHeadRanges ranges;
  RopeTableView rope;  // cos/sin pointers where the kernel reads them
};

// The arguments for the heads of `layer` with heads[h] != 0, over the given arenas and table (device
// or host pointers alike). std::invalid_argument when `heads` has not one entry per head, the table
// is not for this head_dim, or it does not cover the longest listed head's indices.
inline DeviceKvReassignArgs plan_reassign(const DeviceKvLayout& layout, int layer, std::span<const char> heads,
                                          void* keys, int32_t* positions, const RopeTableView& rope) {
  const DeviceKvLayerLayout& l = layout.layer(layer);
  if (heads.size() != l.heads.size())
    throw std::invalid_argument("device KV reassign: " + std::to_string(heads.size()) + " flags for " +
                                std::to_string(l.heads.size()) + " heads");
  if (rope.half * 2 != layout.geometry().head_dim)
    throw std::invalid_argument("device KV reassign: a RoPE table for head_dim " + std::to_string(rope.half * 2) +
                                ", the cache's is " + std::to_string(layout.geometry().head_dim));
  std::vector<int64_t> first(l.heads.size(), 0), rows(l.heads.size(), 0);
  for (size_t h = 0; h < l.heads.size(); ++h) {
    rows[h] = heads[h] ? l.heads[h].length : 0;
    if (rows[h] > rope.positions)
      throw std::invalid_argument("device KV reassign: the RoPE table holds " + std::to_string(rope.positions) +
                                  " positions, head " + std::to_string(h) + " of layer " + std::to_string(layer) +
                                  " holds " + std::to_string(rows[h]) + " entries");
  }
  DeviceKvReassignArgs a;
  a.keys = keys;
  a.positions = positions;
  a.type = layout.geometry().type;
  a.head_dim = layout.geometry().head_dim;
  a.ranges = plan_head_ranges(layout, layer, first, rows, "device KV reassign");
  a.rope = rope;
  return a;
}

KVEVICT_HOST_DEVICE inline size_t device_kv_reassign_elements(const DeviceKvReassignArgs& a) {
  return device_kv_range_rows(a.ranges);
}

// Entry e (a row of a listed head): its key re-rotated from its old position to its index, pair by
// pair as Rope::rerotate does (rope_rerotate_pair), then stored and its position set. Returns false,
// touching nothing, when the old position lies outside the table (the caller's contract was broken).
KVEVICT_HOST_DEVICE inline bool device_kv_reassign_element(const DeviceKvReassignArgs& a, size_t e) {
  int64_t t = 0;
  const int h = device_kv_range_head(a.ranges, e, &t);
  const int64_t row = a.ranges.start_row[h] + t;
  const int32_t old = a.positions[row];
  if (old == t) return true;
  if (old < 0 || old >= a.rope.positions) return false;
  const int half = a.rope.half;
  const size_t from = static_cast<size_t>(old) * half, to = static_cast<size_t>(t) * half;
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(a.head_dim);
  for (int i = 0; i < half; ++i) {
    int ia, ib;
    rope_pair_elements(a.rope.style, i, half, &ia, &ib);
    float x0 = device_kv_load(a.keys, a.type, row, a.head_dim, ia), x1 = device_kv_load(a.keys, a.type, row, a.head_dim, ib);
    rope_rerotate_pair(&x0, &x1, a.rope.cos[from + i], a.rope.sin[from + i], a.rope.cos[to + i], a.rope.sin[to + i]);
    device_kv_store(a.keys, a.type, at + static_cast<size_t>(ia), x0);
    device_kv_store(a.keys, a.type, at + static_cast<size_t>(ib), x1);
  }
  a.positions[row] = static_cast<int32_t>(t);
  return true;
}

}  // namespace kvevict
