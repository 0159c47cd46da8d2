#pragma once
// A device-resident KV cache (issue 10; built only with KVEVICT_HAVE_CUDA). Ragged per (layer,
// stored head) in one key, one value and one position arena per layer (layout and growth:
// core/decode/device_kv_layout.h), elements of the chosen KvType (F16 by default), appended and
// compacted on the device by kernels whose per-element code is shared with DeviceKvTwin
// (core/decode/device_kv_twin.h), the CPU-tested host twin. The host sees entries only on request
// (read_head); snapshots and restores are device-to-device copies.
//
// Streams: everything runs on the legacy default stream, like the CUDA decoder's kernels, so the
// cache's work is ordered with theirs without events. read_head synchronises (device -> host).
// Errors: a failing CUDA call throws RuntimeError naming it; bad plans throw before any launch
// (device_kv_layout.h). This header needs no CUDA headers.
//
// Status: its GPU test (tests/core/device_kv_cache_gpu_test.cpp: against the host twin; skips
// without a GPU) passed on an H200 on 2026-12-04, under compute-sanitizer memcheck too. The
// codebooks (tests/core/device_kv_codebook_gpu_test.cpp, against the twin) have not run on a GPU.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_twin.h"

namespace kvevict::cuda {

class DeviceKvCache;

// A packed device copy of a whole cache (capacities = lengths); moves only.
class DeviceKvSnapshot {
 public:
  DeviceKvSnapshot();
  ~DeviceKvSnapshot();
  DeviceKvSnapshot(DeviceKvSnapshot&&) noexcept;
  DeviceKvSnapshot& operator=(DeviceKvSnapshot&&) noexcept;
  const DeviceKvLayout& layout() const;
  size_t bytes() const { return layout().bytes_reserved(); }

 private:
  friend class DeviceKvCache;
  struct Data;
  std::unique_ptr<Data> data_;
};

// Uses the current CUDA device (cudaSetDevice before constructing it).
class DeviceKvCache {
 public:
  explicit DeviceKvCache(const DeviceKvGeometry& geometry, const DeviceKvGrowthPolicy& policy = {});
  ~DeviceKvCache();
  DeviceKvCache(const DeviceKvCache&) = delete;
  DeviceKvCache& operator=(const DeviceKvCache&) = delete;

  const DeviceKvLayout& layout() const;
  // keys / values: device pointers to [n][src_stride] f32 (post-RoPE keys), head h at column
  // h * head_dim, as the decoder's K/V projection leaves them. Head h's token i gets position
  // first_positions[h] + i. Grows (relocates) the layer first when a head lacks room.
  void append(int layer, int n, const float* keys, const float* values, int64_t src_stride,
              std::span<const int32_t> first_positions);
  // The same from host arrays (uploaded first): for tests and tools, not the decode loop.
  void append_from_host(int layer, int n, const float* keys, const float* values, int64_t src_stride,
                        std::span<const int32_t> first_positions);
  // Keeps keep[h] in head h, in that order (plan_compaction's contract): ascending lists in place
  // (no second buffer), others gathered through scratch rows and copied back.
  void compact(int layer, const std::vector<std::vector<int>>& keep);
  // A layer left mostly empty gives its room back (DeviceKvLayout::layout_to_release): new, smaller
  // arenas, the live rows copied, the old freed. Where the smaller arenas cannot be allocated the
  // layer keeps its arenas (optional work, never an error). The mirror calls it after each flush's
  // work on the layer.
  void release_room(int layer);
  // Overwrites rows [first_row, first_row + rows) of `head` from HOST f32 rows ([rows][head_dim])
  // and positions (uploaded first), converted as append converts; the head's length becomes
  // max(length, first_row + rows) (DeviceKvLayout::write_args). For the device mirror's resync of
  // rows the host cache changed in place (device_kv_mirror.h).
  void write_rows(int layer, int head, int64_t first_row, int64_t rows, const float* keys, const float* values,
                  const int32_t* positions);
  // One head's live entries copied to the host (synchronises): inspect, reports, tests.
  DeviceKvHeadContents read_head(int layer, int head) const;
  // Rows [first_row, first_row + rows) of one head (synchronises; std::out_of_range outside its
  // length): the host cache's catch-up after deferred appends (device_kv_mirror.h, sync_host).
  DeviceKvHeadContents read_rows(int layer, int head, int64_t first_row, int64_t rows) const;
  // Only their positions (the same check; one copy of 4 bytes a row): a codebook head's catch-up,
  // whose codes and entries come from the device's codebook news.
  std::vector<int32_t> read_positions(int layer, int head, int64_t first_row, int64_t rows) const;
  // The norms (row_norms.h: the host's bits) of rows [first_row[h], first_row[h] + rows[h]) of each
  // head h of `layer`, head after head: one kernel and one download for the layer (synchronises;
  // std::out_of_range outside a head's length). For a host cache holding positions only.
  std::vector<RowNorms> row_norms(int layer, std::span<const int64_t> first_row, std::span<const int64_t> rows) const;
  // Re-assigns the positions of every head h of `layer` with heads[h] != 0 (device_kv_reassign.h):
  // one kernel for the layer, rotating with `rope`, a HOST table (uploaded when it has grown since
  // the last call). std::invalid_argument as plan_reassign. An old position outside the table
  // leaves its entry as it was (the host KVCache reserves the table before it re-assigns).
  void reassign_positions(int layer, std::span<const char> heads, const RopeTableView& rope);

  // The row merges of row_merges.h (device_kv_merges.h's element bodies). nearest_kept_keys: every
  // listed head of the layer at once, one kernel for the kept keys' norms and one block per evicted
  // entry, one download. value_norms: one thread per listed row of one head, one download.
  // fold_rows: one thread per folded element of one head, no synchronisation. std::invalid_argument
  // as plan_nearest_kept_keys / plan_value_norms / plan_fold_rows.
  std::vector<std::vector<KeptKeyMatch>> nearest_kept_keys(int layer, std::span<const KeptKeySearch> searches) const;
  std::vector<double> value_norms(int layer, int head, std::span<const int> rows) const;  // synchronises
  void fold_rows(int layer, int head, const RowFolds& folds);

  // SpindleKV's codebooks (device_kv_codebook.h's element bodies; DeviceKvTwin's contract):
  // load_codebooks uploads the host's codes; codebook_append runs one block of threads per book
  // over the last `rows` rows of every head of `layer` (keys / values: DEVICE pointers to the block
  // as appended, [rows][src_stride] f32), matching, overwriting and logging them, with `rope` a
  // HOST table (uploaded when it has grown); codebook_news downloads what the device added
  // (synchronises). No codes or entries cross in an append.
  void load_codebooks(int layer, const DeviceCodebookLoad& load);
  void codebook_append(int layer, int rows, const float* keys, const float* values, int64_t src_stride,
                       int32_t first_position, const RopeTableView& rope);
  DeviceCodebookNews codebook_news(int layer);
  // Device bytes the codebooks occupy (0 before the first load).
  size_t codebook_bytes() const;

  DeviceKvSnapshot snapshot() const;
  // Back to the snapshot's lengths and contents (device-to-device; grows a layer only when a head
  // lacks room). std::invalid_argument for a snapshot of another geometry.
  void restore(const DeviceKvSnapshot& snapshot);

  // The HOST table `rope` on the device (uploaded whole when it has grown since the last call, the
  // copy reassign_positions and codebook_append use), for kernels that rotate cached keys.
  RopeTableView device_rope(const RopeTableView& rope);

  // The layer's arenas on the device, for kernels that read the cache (rows per layout().layer()).
  const void* keys(int layer) const;
  const void* values(int layer) const;
  const int32_t* positions(int layer) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvevict::cuda
