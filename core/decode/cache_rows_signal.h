#pragma once
// A layer's cached keys and values as a decoder hands them to an observer that scores on the
// decoder's device (ObservationRequest::cache_keys_on_device, cache_values_on_device,
// row_norms_on_device; LayerSignals::cache_rows): the score programs' K and V signals ([head_dim][T]
// per head, t innermost: core/engine/policy_program.h) and their rows' norms (key_norm, value_norm:
// [T] per head, row_norms.h's definition), read by the generated kernels where they are, so the
// call's rows never come to the host, nor their norms.
//
// What it holds: for stored head h of the layer (cache order, the cache as the block's append left
// it, before the observer changes it), element (i, t) of its key (value) rows as f32 at
// keys[offset[h] + i * length[h] + t], t < length[h], i < head_dim: the stored words converted as
// the host cache converts them (device_kv_load), the keys post-RoPE as cached. Heads are packed one
// after another (offset[h + 1] = offset[h] + head_dim * length[h]), so every head's block is
// exactly the [d][T] a score program reads, however ragged the layer.
// Lifetime: valid during the observer's after_layer only, and only until the observer changes the
// layer's cache; the decoder reuses its buffer for the next layer. Memory: head_dim x the layer's
// entries floats per side asked for (a prompt of 32K on an 8B geometry: 128 MiB for the keys).
//
// Keys before RoPE (K_pre, ObservationRequest::cache_keys_pre_rope_on_device): the same layout as
// the keys, each stored key rotated back by its entry's position with the decoder's RoPE table
// (rope_rotate_pair_back, explicit fmaf: the twin's and the kernel's bits are the same; the host's
// KVCache::keys_pre_rope rotates with its own f32 expression, so the two agree to f32 rounding).
//
// Projected value norms (out_norm_l1, ObservationRequest::out_norms_l1_on_device): for stored head
// h and query head g of its group, out_norms_l1[out_norm_offset(h) + g * length[h] + t] =
// ||W_o,(h * group + g) v_t||_1 (projected_value_norms.h), [group][length] per head, packed head
// after head; from the layer's W_o on the decoder's device. Memory: group x the layer's entries floats.
//
// Norms: for stored head h, key_norms[norm_offset(h) + t] and value_norms[norm_offset(h) + t] are
// the norms of entry t's stored key and value (the same bits as KVCache's and the device cache's
// row norms: device_kv_row_norms.h). Asked for together (both or neither).
//
// The element bodies below are the kernels' (core/decode/cuda/cache_rows.cu) and the CPU twin's
// (cache_rows_twin): one thread per output float of K and V, written contiguously; one per entry
// for the norms.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/decode/device_kv_head_ranges.h"
#include "core/decode/device_kv_row_norms.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/projected_value_norms.h"
#include "core/decode/rope.h"

namespace kvevict {

struct CacheRowsSignal {
  const float* keys = nullptr;         // null: the keys were not asked for (or the decoder made none)
  const float* values = nullptr;       // null: the values were not asked for
  const float* key_norms = nullptr;    // null: the norms were not asked for
  const float* value_norms = nullptr;  // null with key_norms
  const float* keys_pre_rope = nullptr;  // null: not asked for; the layout of `keys`
  const float* out_norms_l1 = nullptr;   // null: not asked for; [group][length] per head
  int group = 0;                         // query heads per stored head in out_norms_l1
  bool on_device = false;              // memory of the decoder's CUDA device; host memory otherwise
  int head_dim = 0;
  std::vector<int64_t> length;    // [stored head] entries
  std::vector<int64_t> offset;    // [stored head] floats from keys (values) to the head's block

  bool empty() const {
    return keys == nullptr && values == nullptr && key_norms == nullptr && keys_pre_rope == nullptr &&
           out_norms_l1 == nullptr;
  }
  int n_heads() const { return static_cast<int>(length.size()); }
  // Entries from key_norms (value_norms) to head h's norms.
  int64_t norm_offset(int h) const { return offset[static_cast<size_t>(h)] / head_dim; }
  // Floats from out_norms_l1 to head h's [group][length[h]] block.
  int64_t out_norm_offset(int h) const { return group * norm_offset(h); }
};

// What a call asks for.
struct CacheRowsWanted {
  bool keys = false, values = false, norms = false;
  bool keys_pre_rope = false;
  bool out_norms_l1 = false;
  bool any() const { return keys || values || norms || keys_pre_rope || out_norms_l1; }
  bool any_rows() const { return keys || values || keys_pre_rope; }  // what cache_rows_element writes
};

// One launch's arguments: every live row of every head of one layer (ranges in rows; the output
// block of head h starts at float head_dim * ranges.out_offset[h]). Travels by value.
struct CacheRowsArgs {
  const void* keys = nullptr;
  const void* values = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0;
  DeviceKvHeadRanges ranges;
  float* keys_out = nullptr;    // null: not written
  float* values_out = nullptr;  // null: not written
  float* key_norms_out = nullptr;    // one per entry, heads packed (ranges.out_offset); null: not written
  float* value_norms_out = nullptr;  // written with key_norms_out
  // Keys before RoPE: written with the rows' positions (`positions`, the arena's) and a RoPE table
  // covering them (`rope`, in the same memory as the arenas); an entry whose position the table
  // does not cover is written NaN. null: not written.
  float* keys_pre_rope_out = nullptr;
  const int32_t* positions = nullptr;
  RopeTableView rope;
  // Projected value norms: written with the layer's output projection (`projection`, in the
  // arenas' memory), [projection.group][length] per head from float projection.group *
  // ranges.out_offset[h]. null: not written.
  float* out_norms_l1_out = nullptr;
  OutputProjectionView projection;
};

// The arguments for the whole of each head of `view`'s layer, into the given outputs (device or
// host pointers alike; either may be null). std::invalid_argument for a view of more than
// kDeviceKvMaxHeads heads or a head_dim below 1.
CacheRowsArgs plan_cache_rows(const DeviceKvLayerView& view, float* keys_out, float* values_out);

// Floats per side the arguments write: head_dim x the layer's entries.
KVEVICT_HOST_DEVICE inline size_t cache_rows_floats(const CacheRowsArgs& a) {
  return static_cast<size_t>(a.head_dim) * device_kv_range_rows(a.ranges);
}

// Output x of a layout packing, head after head, a [rows][length] block per head (rows = head_dim
// for K and V, the group for the projected value norms): its head h (head h's block spans rows x
// its range, so x / rows falls in the head's range), its row i in the block and its entry's arena
// row.
struct PackedBlockElement {
  int head = 0;
  int i = 0;
  int64_t row = 0;
};
KVEVICT_HOST_DEVICE inline PackedBlockElement packed_block_element(const DeviceKvHeadRanges& r, size_t x, size_t rows) {
  int64_t unused = 0;
  PackedBlockElement e;
  e.head = device_kv_range_head(r, x / rows, &unused);
  const size_t local = x - rows * static_cast<size_t>(r.out_offset[e.head]);
  const size_t length = static_cast<size_t>(r.out_offset[e.head + 1] - r.out_offset[e.head]);
  e.i = static_cast<int>(local / length);
  e.row = r.start_row[e.head] + static_cast<int64_t>(local % length);
  return e;
}

// Output float x (of each side asked for): its dimension i and entry within its head's [head_dim]
// [length] block.
KVEVICT_HOST_DEVICE inline void cache_rows_element(const CacheRowsArgs& a, size_t x) {
  const PackedBlockElement e = packed_block_element(a.ranges, x, static_cast<size_t>(a.head_dim));
  const int i = e.i;
  const int64_t row = e.row;
  if (a.keys_out) a.keys_out[x] = device_kv_load(a.keys, a.type, row, a.head_dim, i);
  if (a.values_out) a.values_out[x] = device_kv_load(a.values, a.type, row, a.head_dim, i);
  if (a.keys_pre_rope_out) {
    // Element i's pair (RoPE's pairing convention), rotated back by the entry's position.
    const int half = a.head_dim / 2;
    const int pair = a.rope.style == RopeStyle::AdjacentPairs ? i / 2 : i % half;
    int first = 0, second = 0;
    rope_pair_elements(a.rope.style, pair, half, &first, &second);
    const int32_t position = a.positions[row];
    if (position < 0 || position >= a.rope.positions) {
      a.keys_pre_rope_out[x] = NAN;
    } else {
      float x0 = device_kv_load(a.keys, a.type, row, a.head_dim, first);
      float x1 = device_kv_load(a.keys, a.type, row, a.head_dim, second);
      const size_t at = static_cast<size_t>(position) * static_cast<size_t>(half) + static_cast<size_t>(pair);
      rope_rotate_pair_back(&x0, &x1, a.rope.cos[at], a.rope.sin[at]);
      a.keys_pre_rope_out[x] = i == first ? x0 : x1;
    }
  }
}

// Entries the norms' arguments cover: the layer's entries.
KVEVICT_HOST_DEVICE inline size_t cache_rows_entries(const CacheRowsArgs& a) { return device_kv_range_rows(a.ranges); }

// Entry e's key and value norms (its head's range, then its row), as the device cache's row norms
// compute them.
KVEVICT_HOST_DEVICE inline void cache_rows_norm_element(const CacheRowsArgs& a, size_t e) {
  device_kv_range_row_norms(a.ranges, a.keys, a.values, a.type, a.head_dim, e, a.key_norms_out, a.value_norms_out);
}

// Outputs the projected value norms' arguments cover: the group's query heads x the layer's entries.
KVEVICT_HOST_DEVICE inline size_t cache_rows_out_norms(const CacheRowsArgs& a) {
  return static_cast<size_t>(a.projection.group) * device_kv_range_rows(a.ranges);
}

// Output x of the projected value norms: its query g (the block's row) and entry within its head's
// [group][length] block. `row`: the entry's value as f32 (head_dim floats of scratch for the caller).
KVEVICT_HOST_DEVICE inline void cache_rows_out_norm_element(const CacheRowsArgs& a, size_t x, float* row) {
  const PackedBlockElement e = packed_block_element(a.ranges, x, static_cast<size_t>(a.projection.group));
  for (int b = 0; b < a.head_dim; ++b) row[b] = device_kv_load(a.values, a.type, e.row, a.head_dim, b);
  a.out_norms_l1_out[x] = projected_value_l1(a.projection, e.head * a.projection.group + e.i, row, a.head_dim);
}

// The observer's description of what `a` wrote (lengths and offsets from its ranges).
CacheRowsSignal describe_cache_rows(const CacheRowsArgs& a, bool on_device);

// Sets the keys before RoPE's inputs: the view's positions and `rope` (both in the arenas'
// memory). std::invalid_argument for an odd head_dim, a table of another half, or no positions
// for a layer that has entries.
void plan_cache_keys_pre_rope(CacheRowsArgs& a, const DeviceKvLayerView& view, const RopeTableView& rope,
                              float* keys_pre_rope_out);

// Sets the projected value norms' inputs: the layer's output projection `projection` (in the arenas'
// memory) for every stored head's group. std::invalid_argument for a group below 1, a projection
// whose heads or features do not fit (dim < 1, no data for a layer that has entries), or a head_dim
// past kProjectedValueMaxHeadDim.
void plan_cache_out_norms_l1(CacheRowsArgs& a, const OutputProjectionView& projection, float* out_norms_l1_out);

// The CPU twin's host buffers (a side not asked for is left empty).
struct CacheRowsHost {
  std::vector<float> keys, values, key_norms, value_norms, keys_pre_rope, out_norms_l1;
};

// The CPU twin: the element bodies over a view of host arenas (DeviceKvTwin::layer_view) into
// `out` (resized; what is not asked for is cleared and left null in the signal), described as host
// memory. `rope`: a host table covering the view's positions (read only for the keys before RoPE);
// `projection`: the layer's output projection in host memory (read only for the projected value
// norms).
CacheRowsSignal cache_rows_twin(const DeviceKvLayerView& view, CacheRowsWanted wanted, CacheRowsHost& out,
                                const RopeTableView& rope = {}, const OutputProjectionView& projection = {});

}  // namespace kvevict
