#pragma once
// The per-element work of the device KV cache's kernels, written once as inline
// KVEVICT_HOST_DEVICE functions: core/decode/cuda/device_kv_cache.cu launches them on the GPU, and
// DeviceKvTwin (device_kv_twin.h) runs the same bodies over an emulated grid on the CPU, so the
// CPU tests exercise the code the kernels run. Plain structs only; plans come from
// device_kv_layout.h.
//
// Arenas: keys and values are [rows][head_dim] elements of the cache's KvType; positions are
// [rows] int32. Appends convert f32 with kv_type_scalar.h (the host KVCache's rounding, bit for
// bit). Compaction moves raw 16-bit words (an F32 element is two), so it never converts.
#include <cstddef>
#include <cstdint>

#include "core/decode/kv_type.h"
#include "core/decode/kv_type_scalar.h"
#include "core/util/host_device.h"

namespace kvevict {

// Element bytes per KvType, indexed by the enum's value; the function below is the one the
// kernels use, and the asserts tie it to the table and to the host cache's types.
inline constexpr size_t kDeviceKvElementBytes[] = {sizeof(float), sizeof(uint16_t), sizeof(uint16_t)};  // F32, F16, BF16
static_assert(static_cast<int>(KvType::F32) == 0 && static_cast<int>(KvType::F16) == 1 &&
                  static_cast<int>(KvType::BF16) == 2,
              "kDeviceKvElementBytes is indexed by KvType");
static_assert(sizeof(kDeviceKvElementBytes) / sizeof(kDeviceKvElementBytes[0]) == 3, "one size per KvType");
KVEVICT_HOST_DEVICE constexpr size_t device_kv_element_bytes(KvType type) {
  return type == KvType::F32 ? sizeof(float) : sizeof(uint16_t);
}
static_assert(device_kv_element_bytes(KvType::F32) == kDeviceKvElementBytes[0] &&
                  device_kv_element_bytes(KvType::F16) == kDeviceKvElementBytes[1] &&
                  device_kv_element_bytes(KvType::BF16) == kDeviceKvElementBytes[2],
              "element sizes agree with the table");
static_assert(sizeof(float) == 2 * sizeof(uint16_t), "an F32 element is two 16-bit words");

// Per-head data travels by value in the kernels' parameters (no upload per call).
inline constexpr int kDeviceKvMaxHeads = 128;
// Compaction: one block per head of kDeviceKvCompactThreads threads, each holding up to
// kDeviceKvWordsPerThread words of keys and as many of values per chunk.
inline constexpr int kDeviceKvCompactThreads = 256;
inline constexpr int kDeviceKvWordsPerThread = 8;
inline constexpr int kDeviceKvMaxRowWords = kDeviceKvCompactThreads * kDeviceKvWordsPerThread;

// ---- append: a block of n tokens, [n][src_stride] f32 keys / values, head h at column h * head_dim.
struct DeviceKvAppendHead {
  int64_t dst_row = 0;         // arena row of the block's token 0 (base + length)
  int32_t first_position = 0;  // position of the block's token 0 in this head
};
struct DeviceKvAppendArgs {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t src_stride = 0;  // floats from one token's row to the next (>= n_heads * head_dim)
  void* key_arena = nullptr;
  void* value_arena = nullptr;
  int32_t* positions = nullptr;
  int n = 0, n_heads = 0, head_dim = 0;
  KvType type = KvType::F16;
  DeviceKvAppendHead heads[kDeviceKvMaxHeads];
};

KVEVICT_HOST_DEVICE inline size_t device_kv_append_elements(const DeviceKvAppendArgs& a) {
  return static_cast<size_t>(a.n) * a.n_heads * a.head_dim;
}

KVEVICT_HOST_DEVICE inline void device_kv_store(void* arena, KvType type, size_t index, float x) {
  switch (type) {
    case KvType::F32: static_cast<float*>(arena)[index] = x; break;
    case KvType::F16: static_cast<uint16_t*>(arena)[index] = kv_scalar::f32_to_f16(x); break;
    case KvType::BF16: static_cast<uint16_t*>(arena)[index] = kv_scalar::f32_to_bf16(x); break;
  }
}

// Element e of [n][n_heads][head_dim]: converts key and value element e into head h's region;
// the d == 0 element of each (token, head) also writes the position.
KVEVICT_HOST_DEVICE inline void device_kv_append_element(const DeviceKvAppendArgs& a, size_t e) {
  const size_t d = e % a.head_dim, th = e / a.head_dim;
  const int h = static_cast<int>(th % a.n_heads), i = static_cast<int>(th / a.n_heads);
  const size_t src = static_cast<size_t>(i) * a.src_stride + static_cast<size_t>(h) * a.head_dim + d;
  const int64_t row = a.heads[h].dst_row + i;
  const size_t dst = static_cast<size_t>(row) * a.head_dim + d;
  device_kv_store(a.key_arena, a.type, dst, a.keys[src]);
  device_kv_store(a.value_arena, a.type, dst, a.values[src]);
  if (d == 0) a.positions[row] = a.heads[h].first_position + i;
}

// ---- write: rows [dst_row, dst_row + rows) of one head's region overwritten from f32 rows and
// their positions (the device mirror's resync of rows the host changed in place: merges, channel
// zeroing, re-rotated keys, codebook reconstructions, or a whole head). Converts as append does.
struct DeviceKvWriteArgs {
  const float* keys = nullptr;             // [rows][head_dim]
  const float* values = nullptr;           // [rows][head_dim]
  const int32_t* src_positions = nullptr;  // [rows]
  void* key_arena = nullptr;
  void* value_arena = nullptr;
  int32_t* positions = nullptr;
  int64_t dst_row = 0;  // arena row of source row 0
  int64_t rows = 0;
  int head_dim = 0;
  KvType type = KvType::F16;
};

KVEVICT_HOST_DEVICE inline size_t device_kv_write_elements(const DeviceKvWriteArgs& a) {
  return static_cast<size_t>(a.rows) * a.head_dim;
}

// Element e of [rows][head_dim]; the d == 0 element of a row also writes its position.
KVEVICT_HOST_DEVICE inline void device_kv_write_element(const DeviceKvWriteArgs& a, size_t e) {
  const size_t d = e % a.head_dim, r = e / a.head_dim;
  const size_t dst = static_cast<size_t>(a.dst_row + static_cast<int64_t>(r)) * a.head_dim + d;
  device_kv_store(a.key_arena, a.type, dst, a.keys[e]);
  device_kv_store(a.value_arena, a.type, dst, a.values[e]);
  if (d == 0) a.positions[a.dst_row + static_cast<int64_t>(r)] = a.src_positions[r];
}

// ---- compaction: in place, chunks of chunk_rows moves in ascending order (device_kv_layout.h).
struct DeviceKvCompactHead {
  int64_t base_row = 0;     // the head's region
  int64_t list_offset = 0;  // its moves' source rows start at src_rows[list_offset]
  int32_t first = 0;        // move m writes head row first + m
  int32_t moves = 0;        // number of moves
};
struct DeviceKvCompactArgs {
  uint16_t* key_arena = nullptr;  // viewed as 16-bit words
  uint16_t* value_arena = nullptr;
  int32_t* positions = nullptr;
  const int32_t* src_rows = nullptr;  // head-relative source row of each move
  int row_words = 0;                  // words per key (value) row
  int chunk_rows = 0;                 // moves per chunk: chunk_rows * row_words <= kDeviceKvMaxRowWords
  int n_heads = 0;                    // heads listed below (one block each)
  DeviceKvCompactHead heads[kDeviceKvMaxHeads];
};
// What one thread holds between a chunk's load and its store.
struct DeviceKvCompactRegs {
  uint16_t key[kDeviceKvWordsPerThread];
  uint16_t value[kDeviceKvWordsPerThread];
  int32_t position;
};

// Moves per chunk for rows of row_words words: as many as one block holds, at most one per thread.
KVEVICT_HOST_DEVICE inline int device_kv_chunk_rows(int row_words) {
  const int rows = kDeviceKvMaxRowWords / row_words;
  return rows < kDeviceKvCompactThreads ? rows : kDeviceKvCompactThreads;
}
KVEVICT_HOST_DEVICE inline int device_kv_compact_chunks(const DeviceKvCompactArgs& a, int block) {
  return (a.heads[block].moves + a.chunk_rows - 1) / a.chunk_rows;
}

// Chunk `chunk` of block `block`: its first move, its moves and their words (per array).
struct DeviceKvChunk {
  int m0, rows, words;
};
KVEVICT_HOST_DEVICE inline DeviceKvChunk device_kv_chunk(const DeviceKvCompactArgs& a, int block, int chunk) {
  const int m0 = chunk * a.chunk_rows, left = a.heads[block].moves - m0;
  const int rows = left < a.chunk_rows ? left : a.chunk_rows;
  return {m0, rows, rows * a.row_words};
}

// Thread `thread` of block `block` (listed head) reads its share of chunk `chunk` into r. A move
// whose source is its destination is skipped (no read, no write).
KVEVICT_HOST_DEVICE inline void device_kv_compact_load(const DeviceKvCompactArgs& a, int block, int chunk, int thread,
                                                       DeviceKvCompactRegs& r) {
  const DeviceKvCompactHead& hd = a.heads[block];
  const DeviceKvChunk k = device_kv_chunk(a, block, chunk);
  for (int s = 0; s < kDeviceKvWordsPerThread; ++s) {
    const int w = thread + s * kDeviceKvCompactThreads;
    if (w >= k.words) break;
    const int j = w / a.row_words, c = w % a.row_words;
    const int32_t src = a.src_rows[hd.list_offset + k.m0 + j];
    if (src == hd.first + k.m0 + j) continue;
    const size_t at = static_cast<size_t>(hd.base_row + src) * a.row_words + c;
    r.key[s] = a.key_arena[at];
    r.value[s] = a.value_arena[at];
  }
  if (thread < k.rows) r.position = a.positions[hd.base_row + a.src_rows[hd.list_offset + k.m0 + thread]];
}

// The same thread writes what it loaded to the chunk's destination rows.
KVEVICT_HOST_DEVICE inline void device_kv_compact_store(const DeviceKvCompactArgs& a, int block, int chunk, int thread,
                                                        const DeviceKvCompactRegs& r) {
  const DeviceKvCompactHead& hd = a.heads[block];
  const DeviceKvChunk k = device_kv_chunk(a, block, chunk);
  for (int s = 0; s < kDeviceKvWordsPerThread; ++s) {
    const int w = thread + s * kDeviceKvCompactThreads;
    if (w >= k.words) break;
    const int j = w / a.row_words, c = w % a.row_words;
    const int32_t dst = hd.first + k.m0 + j;
    if (a.src_rows[hd.list_offset + k.m0 + j] == dst) continue;
    const size_t at = static_cast<size_t>(hd.base_row + dst) * a.row_words + c;
    a.key_arena[at] = r.key[s];
    a.value_arena[at] = r.value[s];
  }
  if (thread < k.rows) a.positions[hd.base_row + hd.first + k.m0 + thread] = r.position;
}

// ---- gather: out of place, for heads whose keep list is in another order (score order). Scratch
// row g receives arena row src_rows[g]; copies then bring each head's rows back to its region
// (DeviceKvCompactionPlan::gather_back), as KVCache::keep does with a temporary.
struct DeviceKvGatherArgs {
  const uint16_t* key_arena = nullptr;
  const uint16_t* value_arena = nullptr;
  const int32_t* positions = nullptr;
  uint16_t* key_scratch = nullptr;
  uint16_t* value_scratch = nullptr;
  int32_t* position_scratch = nullptr;
  const int64_t* src_rows = nullptr;  // absolute arena rows, one per scratch row
  int64_t rows = 0;
  int row_words = 0;
};

KVEVICT_HOST_DEVICE inline size_t device_kv_gather_elements(const DeviceKvGatherArgs& a) {
  return static_cast<size_t>(a.rows) * a.row_words;
}

// Word e of the scratch ([rows][row_words]); the c == 0 word of a row also moves its position.
KVEVICT_HOST_DEVICE inline void device_kv_gather_element(const DeviceKvGatherArgs& a, size_t e) {
  const size_t g = e / a.row_words, c = e % a.row_words;
  const size_t at = static_cast<size_t>(a.src_rows[g]) * a.row_words + c;
  a.key_scratch[e] = a.key_arena[at];
  a.value_scratch[e] = a.value_arena[at];
  if (c == 0) a.position_scratch[g] = a.positions[a.src_rows[g]];
}

}  // namespace kvevict
