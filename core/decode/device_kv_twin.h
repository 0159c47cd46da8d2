#pragma once
// The device KV cache's host twin: the same layouts (DeviceKvLayout) and the same element code
// (device_kv_elements.h) as core/decode/cuda/device_kv_cache.cu, run on host arenas over an
// emulated grid. An append (or an out-of-place gather) runs its element for every index of its
// 1-D grid; an in-place compaction runs each listed head's chunks in ascending order, every thread
// of a chunk loading before any stores (the kernel's __syncthreads). The CPU tests compare it with an independent reference;
// the GPU test compares the device cache with it after the same operations.
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/device_kv_codebook_books.h"
#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/rope.h"
#include "core/decode/row_merges.h"
#include "core/decode/row_norms.h"

namespace kvevict {

// One head's live entries as stored: raw 16-bit words ([length][row_words]; an F32 element is
// two words in memory order) and original positions.
struct DeviceKvHeadContents {
  std::vector<uint16_t> keys, values;
  std::vector<int32_t> positions;
};
// Stored words of `elements` elements of `type` converted to f32 (for inspection and reports).
std::vector<float> device_kv_words_to_f32(KvType type, std::span<const uint16_t> words);

class DeviceKvTwin {
 public:
  explicit DeviceKvTwin(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy = {});

  const DeviceKvLayout& layout() const { return layout_; }
  // Appends a block of n tokens: keys/values are [n][src_stride] f32, head h at column
  // h * head_dim; head h's token i gets position first_positions[h] + i. Grows the layer first
  // when a head lacks room (relocating every head, as the device does).
  void append(int layer, int n, const float* keys, const float* values, int64_t src_stride,
              std::span<const int32_t> first_positions);
  // Keeps keep[h] in head h, in that order (plan_compaction's contract): ascending lists in place,
  // others through scratch rows.
  void compact(int layer, const std::vector<std::vector<int>>& keep);
  // A layer left mostly empty is relocated to smaller arenas (DeviceKvLayout::layout_to_release),
  // as the device does; nothing otherwise.
  void release_room(int layer);
  // Overwrites rows [first_row, first_row + rows) of `head` from f32 rows ([rows][head_dim]) and
  // positions, converted as append converts; the head's length becomes max(length, first_row +
  // rows) (DeviceKvLayout::write_args' contract). Grows the layer first when the head lacks room.
  void write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys, const float* values,
                  const int32_t* positions);
  DeviceKvHeadContents read_head(int layer, int head) const;
  // Rows [first_row, first_row + rows) of one head (within its length; std::out_of_range otherwise).
  DeviceKvHeadContents read_rows(int layer, int head, int64_t first_row, int64_t rows) const;
  // Only their positions (the same check).
  std::vector<int32_t> read_positions(int layer, int head, int64_t first_row, int64_t rows) const;
  // The norms of rows [first_row[h], first_row[h] + rows[h]) of each head h, head after head: the
  // kernel's element body (device_kv_row_norms.h) over the host arenas. std::out_of_range outside
  // a head's length.
  std::vector<RowNorms> row_norms(int layer, std::span<const int64_t> first_row, std::span<const int64_t> rows) const;
  // Re-assigns the positions of every head h of `layer` with heads[h] != 0 (device_kv_reassign.h),
  // rotating with `rope` (a host table). std::invalid_argument as plan_reassign; std::logic_error
  // when an old position lies outside the table.
  void reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope);
  // The row merges of row_merges.h over one head (device_kv_merges.h's element bodies, in the
  // order the contract states); std::invalid_argument as plan_nearest_kept_keys / plan_value_norms /
  // plan_fold_rows.
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer, std::span<const KeptKeySearch> searches) const;
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) const;
  void fold_rows(int layer, int head, const RowFolds& folds);
  // SpindleKV's codebooks (device_kv_codebook.h, device_kv_codebook_books.h): load_codebooks takes
  // the host's codes (std::invalid_argument as DeviceCodebookBooks::load); codebook_append runs the
  // element bodies in order over the last `rows` rows of every head of `layer` (appended from the
  // same keys and values just before), matching them against the books, overwriting them with
  // their reconstructions and logging their entries; codebook_news reads back what it added.
  void load_codebooks(int layer, const DeviceCodebookLoad& load);
  void codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                       int32_t first_position, const RopeTableView& rope);
  DeviceCodebookNews codebook_news(int layer);
  // The view of one layer over the host arenas, for the CPU twins of the kernels that read the
  // cache (window_attention_twin): valid until the layer is next appended to, grown, written,
  // compacted or restored.
  DeviceKvLayerView layer_view(int layer) const;

  struct Arenas {
    std::vector<uint16_t> keys, values;  // [capacity rows][row_words]
    std::vector<int32_t> positions;      // [capacity rows]
  };
  // A packed copy of every layer (capacities = lengths), and its restore: the cache returns to the
  // snapshot's lengths and contents, growing a layer only when a head lacks room.
  struct Snapshot {
    DeviceKvLayout layout;
    std::vector<Arenas> layers;
  };
  Snapshot snapshot() const;
  void restore(const Snapshot& snapshot);

 private:
  struct Codebooks {
    DeviceCodebookBooks books;
    std::vector<float> key_codes, value_codes;  // [books][code capacity][head_dim]
    std::vector<int32_t> key_count, value_count;
    std::vector<CodebookEntry> log;  // [heads][log capacity]
  };
  Codebooks& codebooks(int layer);
  void grow_codebooks(Codebooks& c, int64_t code_capacity, int64_t log_capacity);

  Arenas allocate(const DeviceKvLayerLayout& layout) const;
  void copy_rows(const Arenas& from, Arenas& to, const std::vector<DeviceKvCopy>& copies) const;
  void relocate(int layer, DeviceKvLayerLayout to);

  DeviceKvLayout layout_;
  std::vector<Arenas> arenas_;  // [layer]
  std::vector<Codebooks> codebooks_;  // [layer], made at the first load
};

}  // namespace kvevict
