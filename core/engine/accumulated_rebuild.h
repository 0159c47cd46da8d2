#pragma once
// One layer's accumulated attention (A_acc: each cache entry's attention summed over every query so
// far, per query head; H2O's indicator) rebuilt where it is held, on the scoring device
// (accumulated_attention_store.h): the keeps the engine applied since the last rebuild, the entries
// appended since (they start at zero) and a block's column sums, in one pass, one thread per output
// float. The element body below is the CUDA kernel's (core/engine/cuda/accumulated_rebuild.cu) and
// the CPU twin's.
//
// Layout, the A_acc signal a score program reads ([G][T] per stored head, policy_program.h): the
// layer's stored heads packed one after another, head h's block [group][length h] from float
// new_offset of h. The column sums are a decoder's ([n_query_heads][stride], column_sums_signal.h):
// query head h * group + g's sum for entry t of stored head h at sums[(h * group + g) * stride + t].
//
// Element x of the new layout, of stored head h, query g of its group, entry i:
//   s = i < map_length ? (map_offset >= 0 ? map[map_offset + i] : i) : -1
//   new[x] = (0 <= s < old_length ? old[old_offset + g * old_length + s] : 0) + (sums ? sums[..] : 0)
// A map is the composition of the keeps since the last rebuild (indices into the held entries; one
// at or past old_length is an entry appended after them, still zero); map_offset -1 is no keep.
// One float add per block gives exactly the host engine's `acc[t] += add[t]`.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/util/host_device.h"

namespace kvevict {

// One stored head's part of a rebuild (floats and entries).
struct AccumulatedHeadRebuild {
  int64_t old_offset = 0, old_length = 0;  // its held block [group][old_length]
  int64_t map_offset = -1;                 // into the map; -1: the held entries in order
  int64_t map_length = 0;                  // entries the map (or the held order) gives
  int64_t new_offset = 0, new_length = 0;  // its new block [group][new_length]
};

// One launch's arguments; pointers are of the device that runs it (host memory for the twin).
struct AccumulatedRebuildArgs {
  const float* old_data = nullptr;
  float* new_data = nullptr;
  const AccumulatedHeadRebuild* heads = nullptr;  // [n_heads]
  int n_heads = 0, group = 1;
  const int32_t* map = nullptr;
  const float* sums = nullptr;  // null: nothing added
  int64_t sums_stride = 0;
};

// The host's bookkeeping of one held stored head: what the device holds and the keeps since.
struct AccumulatedHeadBook {
  int64_t held_length = 0;   // entries held (the block's width)
  int64_t offset = 0;        // float offset of its block in the layer's buffer
  bool mapped = false;       // keeps applied since the last rebuild
  std::vector<int32_t> map;  // their composition (when mapped)
};

// A layer's rebuild on the host: the per-head parts, the packed maps, the floats written.
struct AccumulatedRebuildPlan {
  std::vector<AccumulatedHeadRebuild> heads;
  std::vector<int32_t> map;
  size_t total = 0;
};

// The rebuild of `book`'s heads to `lengths` entries each (the cache's, as the column sums saw it),
// group floats per entry. std::logic_error (the engine's bookkeeping gone wrong, never input) when
// lengths has not one entry per head, a length is negative, or a head has fewer entries than its
// held (or kept) ones with no keep to explain it.
AccumulatedRebuildPlan plan_accumulated_rebuild(std::span<const AccumulatedHeadBook> book,
                                                std::span<const int64_t> lengths, int group);

// Composes a keep of `kept` (indices below `length`, the head's entries now) onto a head's
// bookkeeping: afterwards the head gives kept.size() entries. std::logic_error for an index out of
// range or a length below the entries the head already gives.
void compose_accumulated_keep(AccumulatedHeadBook& head, std::span<const int> kept, int64_t length);

KVEVICT_HOST_DEVICE inline void accumulated_rebuild_element(const AccumulatedRebuildArgs& a, size_t x) {
  int lo = 0, hi = a.n_heads;  // the last head whose block starts at or before x (empty ones skipped)
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (static_cast<size_t>(a.heads[mid].new_offset) <= x) lo = mid; else hi = mid;
  }
  const AccumulatedHeadRebuild& h = a.heads[lo];
  const int64_t local = static_cast<int64_t>(x) - h.new_offset;
  const int64_t g = local / h.new_length, i = local % h.new_length;
  int64_t s = -1;
  if (i < h.map_length) s = h.map_offset >= 0 ? a.map[h.map_offset + i] : i;
  float v = (s >= 0 && s < h.old_length) ? a.old_data[h.old_offset + g * h.old_length + s] : 0.0f;
  if (a.sums) v += a.sums[(static_cast<int64_t>(lo) * a.group + g) * a.sums_stride + i];
  a.new_data[x] = v;
}

}  // namespace kvevict
