#pragma once
// The bookkeeping of a device-resident KV cache (issue 10), host-only and CPU-tested: where each
// (layer, stored head)'s entries live, how the cache grows, and the index plans its kernels take.
//
// Layout. Each layer owns three arenas (keys, values, original positions) sharing one row
// numbering: stored head h of layer l holds rows [base_row, base_row + capacity) of each, of which
// the first `length` are live, in cache order (like KVCache's ragged heads). A key or value row is
// head_dim elements of the cache's KvType (F16 by default, BF16 or F32); a position row is one
// int32. Bases are the prefix sums of the capacities (heads packed in head order).
//
// Growth. Capacities are multiples of `row_quantum`; a head that must grow gets at least `growth`
// times its old capacity, so appends of one token at a time relocate O(log n) times. A layout
// beyond `max_rows_per_head` rows for a head or `max_arena_bytes` for one arena is refused with
// std::length_error naming the sizes: the cache never asks the allocator for an absurd size.
// Growing relocates the whole layer (new arenas, every head copied with plan_copy), and so does
// giving room back after a compaction left the layer mostly empty (layout_to_release, which the
// caches' release_room applies).
//
// Plans. plan_append says where a block's n rows land per head; plan_compaction turns keep lists
// into in-place moves (ascending lists) or a gather through scratch rows (any other order); plan_copy turns two layouts into row-range copies (relocation, snapshot,
// restore). The kernels (device_kv_elements.h) take the plans' plain structs as parameters.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/decode/device_kv_elements.h"
#include "core/decode/kv_type.h"

namespace kvevict {

// Shape of a device cache. n_heads are the stored heads per layer (KV heads, or query heads once
// a cache is unfolded); at most kDeviceKvMaxHeads, because plans pass per-head data by value.
struct DeviceKvGeometry {
  int n_layers = 0;
  int n_heads = 0;
  int head_dim = 0;
  KvType type = KvType::F16;

  size_t element_bytes() const { return device_kv_element_bytes(type); }
  size_t row_bytes() const { return static_cast<size_t>(head_dim) * element_bytes(); }  // one key (or value) row
  int row_words() const { return static_cast<int>(row_bytes() / 2); }                   // the same in uint16 words
  // Bytes one entry occupies: its key row, its value row and its position.
  size_t entry_bytes() const { return 2 * row_bytes() + sizeof(int32_t); }
  // Throws std::invalid_argument on a non-positive size, more than kDeviceKvMaxHeads heads, or a
  // head_dim whose row does not fit one compaction chunk (kDeviceKvMaxRowWords words).
  void validate() const;
};

struct DeviceKvGrowthPolicy {
  int64_t row_quantum = 64;              // capacities are multiples of this many rows
  double growth = 1.5;                   // a growing head gets at least this times its capacity
  int64_t max_rows_per_head = 1 << 24;   // 16M entries per (layer, head)
  uint64_t max_arena_bytes = 1ull << 36;  // 64 GiB per arena (keys or values of one layer)
};

struct DeviceKvRegion {
  int64_t base_row = 0;
  int64_t capacity = 0;
  int64_t length = 0;
};

// One layer: a region per stored head, bases packed in head order.
struct DeviceKvLayerLayout {
  std::vector<DeviceKvRegion> heads;
  int64_t capacity_rows() const;  // rows each of the layer's arenas holds
  int64_t live_rows() const;      // sum of lengths
};

// `rows` rows from src_row of one set of arenas to dst_row of another.
struct DeviceKvCopy {
  int64_t src_row = 0;
  int64_t dst_row = 0;
  int64_t rows = 0;
};

// Regions with the given capacities and lengths (lengths[h] <= capacities[h]), bases packed.
DeviceKvLayerLayout packed_layout(std::span<const int64_t> capacities, std::span<const int64_t> lengths);

// `rows` rounded up to the policy's quantum; std::length_error beyond max_rows_per_head.
int64_t rounded_capacity(int64_t rows, const DeviceKvGrowthPolicy& policy);

// The layout after making room for needed[h] live rows in head h: nullopt when every head already
// has that capacity, otherwise every head that lacks it grows to
// rounded_capacity(max(needed, ceil(growth * capacity))), the others keep their capacity; lengths
// are kept. std::length_error when an arena would exceed max_arena_bytes.
std::optional<DeviceKvLayerLayout> reserved_layout(const DeviceKvLayerLayout& current, std::span<const int64_t> needed,
                                                   const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy);

// Where a block of n tokens lands: head h's token i goes to row heads[h].dst_row + i (= base +
// length + i) with position first_positions[h] + i. std::logic_error when a head lacks capacity
// (reserve first), std::invalid_argument on a size mismatch or n <= 0.
void plan_append(const DeviceKvLayerLayout& layout, int n, std::span<const int32_t> first_positions,
                 DeviceKvAppendArgs& args);

// Keep lists -> moves, with KVCache::keep's semantics: keep[h] lists the entries head h keeps, in
// the order they will have, each in [0, length), no duplicates.
//  - A strictly ascending list moves in place: entry keep[h][j] goes to row j <= keep[h][j], and a
//    gather that moves chunks in ascending order, each chunk loaded whole before it is stored,
//    never reads a row it already overwrote. Rows already in place (keep[h][j] == j) are not
//    moved: the head's moves start at `first`, its first displaced entry; a head with nothing to
//    move is not listed.
//  - Any other order (score-ordered lists), and an ascending list with more than
//    max_in_place_moves moves, is gathered out of place into scratch rows (gather_src, absolute
//    arena rows) and copied back to the head's region (gather_back), from its first displaced
//    entry on (the rows before it are already in place).
// Why the cap: the in-place moves of a head run chunk after chunk in one block (each chunk loaded
// whole before it is stored), so a long shift (one entry evicted from the middle of a long head:
// every later row moves) is a long serial loop on one multiprocessor, while the gather spreads the
// same rows over the whole device and the copy back is a device-to-device copy. 1024 moves are 64
// chunks of fp16 rows at head_dim 128 (kDeviceKvCompactThreads); every list at or under the cap
// keeps the in-place path, which needs no scratch.
struct DeviceKvCompactionPlan {
  std::vector<DeviceKvCompactHead> heads;  // in-place heads with moves
  std::vector<int> listed;                 // their stored head indices
  std::vector<int32_t> src_rows;           // concatenated, head-relative source rows of the moves
  std::vector<int64_t> gather_src;         // out-of-place heads: arena row of each scratch row
  std::vector<DeviceKvCopy> gather_back;   // scratch rows (src_row) -> the head's rows (dst_row)
  std::vector<int64_t> new_lengths;        // per stored head: keep[h].size()
};
// std::invalid_argument naming the head and the offending index when an index is out of range or
// repeated, or there is not one list per head; nothing is planned then.
inline constexpr int64_t kDeviceKvMaxInPlaceMoves = 1024;
// DeviceKvLayout::layout_to_release: a layer's arenas are laid smaller when they hold more than this
// many times the rows its heads need.
inline constexpr int64_t kDeviceKvReleaseFactor = 2;
DeviceKvCompactionPlan plan_compaction(const DeviceKvLayerLayout& layout, const std::vector<std::vector<int>>& keep,
                                       int64_t max_in_place_moves = kDeviceKvMaxInPlaceMoves);

// Live rows of `from` copied to the same heads of `to` (to[h].capacity >= from[h].length, else
// std::logic_error): one range per head, adjacent ranges merged (same offset in both layouts).
std::vector<DeviceKvCopy> plan_copy(const DeviceKvLayerLayout& from, const DeviceKvLayerLayout& to);

// The whole cache's bookkeeping: geometry, growth policy and one layout per layer. The device
// cache and its host twin drive their arenas through it, so both follow the same layouts.
class DeviceKvLayout {
 public:
  DeviceKvLayout() = default;
  DeviceKvLayout(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy = {});

  const DeviceKvGeometry& geometry() const { return geometry_; }
  const DeviceKvGrowthPolicy& policy() const { return policy_; }
  const DeviceKvLayerLayout& layer(int layer) const;
  int64_t length(int layer, int head) const { return this->layer(layer).heads.at(head).length; }

  // The layer's layout with room for n more rows per head, or nullopt when it has room already.
  std::optional<DeviceKvLayerLayout> layout_for_append(int layer, int n) const;
  // The layer's layout with room for lengths[h] rows per head (for a restore), or nullopt.
  std::optional<DeviceKvLayerLayout> layout_for_lengths(int layer, std::span<const int64_t> lengths) const;
  // The layer's layout with its room given back, after a compaction left it mostly empty: when
  // its arenas hold more than kDeviceKvReleaseFactor times the rows its heads need with the growth
  // slack (rounded_capacity(ceil(growth x length)) each), every head gets exactly that; else
  // nullopt. Why: arenas only grew, so a layer whose 128K prompt was evicted to a few percent kept
  // the whole prompt's arenas, and the device held the full cache's memory whatever the policy
  // kept (CAKE's cascading bound on the prefill's peak never reached the device). The factor keeps
  // decode-time evictions from relocating the layer at every step: one that evicts a few rows a
  // step never releases after the first release; one that lets a head grow by more than its budget
  // between evictions (decode_every N, a block per step) releases once per eviction and grows back
  // in one to three steps, each an O(budget) copy.
  std::optional<DeviceKvLayerLayout> layout_to_release(int layer) const;
  // Adopts `layout` for `layer` (after its arenas were relocated to it).
  void set_layer(int layer, DeviceKvLayerLayout layout);
  // Refuses (std::invalid_argument) a block of n < 1 tokens or a source stride shorter than a
  // token's heads, before anything changes.
  void check_block(int n, int64_t src_stride) const;
  // The append kernel's arguments for a block landing in the layer as it is now (reserve first):
  // plan_append plus the sources and shape; the caller sets the arenas.
  DeviceKvAppendArgs append_args(int layer, int n, const float* keys, const float* values, int64_t src_stride,
                                 std::span<const int32_t> first_positions) const;
  // The compaction kernel's arguments for `plan`, its source rows at `src_rows` (host or device,
  // wherever the kernel runs); the caller sets the arenas.
  DeviceKvCompactArgs compact_args(const DeviceKvCompactionPlan& plan, const int32_t* src_rows) const;
  // The gather's arguments for `plan`'s out-of-place heads, rows at `src_rows`; arenas and scratch
  // set by the caller.
  DeviceKvGatherArgs gather_args(const DeviceKvCompactionPlan& plan, const int64_t* src_rows) const;
  // Rows [first_row, first_row + rows) of `head` rewritten from host rows (DeviceKvWriteArgs):
  // first_row may not pass the head's length (no holes), and the length becomes
  // max(length, first_row + rows). layout_for_write: the layer's layout with room for that, or
  // nullopt; write_args refuses (std::invalid_argument) a bad head, a negative count or a hole,
  // and (std::logic_error) a head lacking capacity; the caller sets the arenas.
  std::optional<DeviceKvLayerLayout> layout_for_write(int layer, int head, int64_t first_row, int64_t rows) const;
  DeviceKvWriteArgs write_args(int layer, int head, int64_t first_row, int64_t rows, const float* keys,
                               const float* values, const int32_t* positions) const;
  void commit_write(int layer, int head, int64_t first_row, int64_t rows);
  void commit_append(int layer, int n);
  void commit_compaction(int layer, const DeviceKvCompactionPlan& plan);
  // Every layer with capacities equal to lengths: the layout of a snapshot.
  DeviceKvLayout packed() const;

  size_t bytes_in_use() const;    // live entries: keys, values, positions
  size_t bytes_reserved() const;  // capacities: what the arenas occupy

 private:
  DeviceKvGeometry geometry_;
  DeviceKvGrowthPolicy policy_;
  std::vector<DeviceKvLayerLayout> layers_;
};

}  // namespace kvevict
