#pragma once
// Attention over one layer of the device-resident KV cache (DeviceKvLayerView), written once as
// KVEVICT_HOST_DEVICE block phases: core/decode/cuda/ragged_attention.cu runs them as kernels
// (a __syncthreads between phases) and ragged_attention_twin.cpp runs the same phases on the CPU
// over an emulated grid (every thread of a phase before the next phase), so CPU tests exercise the
// tile, split and merge code the GPU runs. Plans come from ragged_attention_twin.h.
//
// Problem. Queries are [n][n_heads][head_dim] f32 (post-RoPE); query head h reads stored head
// kv = h / group. Block query i of a head with len entries sees entries [0, len - n + i] (its own
// entries are the head's last n); a query that sees nothing gets a zero output, row_max -inf and
// row_sum 0. Scores are q.k * scale (scale = 1/sqrt(head_dim)).
//
// Work decomposition (one scheme for decode and prefill). The rows of stored head kv are its
// (query i, query head h) pairs, numbered r = i * group + (h - kv * group); a block takes
// rows_per_block consecutive rows (all reading the same keys, so a key tile loaded once serves
// the whole GQA group and, in prefill, neighbouring queries) and one chunk of `chunk` entries:
// grid = (row_tiles, max_chunks, n_kv), row tiles on x (the only axis without a 65535 limit).
// Decode (n * group small) gets many chunks per head (split-K, "flash-decoding"): each block
// leaves a partial (max m, sum l, unnormalised accumulator) per row and a merge pass combines the
// chunks. Prefill usually fills the GPU with row tiles alone and gets one chunk: blocks then
// normalise and write the output themselves, so no n x S matrix or partial exists.
//
// A block's phases per tile of tile_keys entries (barrier after each): load the key tile into
// shared memory as f32 (16-byte loads; row stride head_dim + 1 so a thread per key reads
// conflict-free) | scores s[r][j] | each row's threads raise the running max and rescale their
// sum and accumulators, while the value tile overwrites the keys | the row's threads turn its
// scores into weights exp(s - m) | every thread adds weights x values to its dims. Per row, the
// head_dim accumulators are spread over the row's threads_per_row threads (registers).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "core/decode/device_kv_view.h"

// Loops over a thread's accumulators unroll on the GPU so they stay in registers.
#if defined(__CUDACC__)
#define KVEVICT_RAGGED_UNROLL _Pragma("unroll")
#else
#define KVEVICT_RAGGED_UNROLL
#endif

namespace kvevict {

inline constexpr int kRaggedThreads = 128;            // threads per attention block
inline constexpr int kRaggedMaxHeadDim = 256;
inline constexpr int kRaggedMaxRows = 16;             // rows per block
inline constexpr int kRaggedRowDims = 2048;           // rows_per_block * head_dim bound (registers)
inline constexpr int kRaggedMaxDimsPerThread = kRaggedRowDims / kRaggedThreads;  // 16 accumulators
inline constexpr int kRaggedSharedBytes = 48 * 1024;  // dynamic shared memory without an opt-in
inline constexpr int kRaggedQueryTile = 8;            // column sums: queries per shared tile
inline constexpr int kRaggedLoadBatch = 8;            // 16-byte loads a thread issues before using them

struct RaggedAttentionPlan {
  int n = 0, n_heads = 0, n_kv = 0, group = 1, head_dim = 0;
  float scale = 1.0f;
  int rows_per_block = 1;   // R, a power of two <= kRaggedMaxRows with R * head_dim <= kRaggedRowDims
  int threads_per_row = 0;  // kRaggedThreads / R; thread t serves row t / threads_per_row
  int dims_per_thread = 0;  // ceil(head_dim / threads_per_row) <= kRaggedMaxDimsPerThread
  int tile_keys = 0;        // entries per shared tile (64, or 32 when 64 would not fit)
  int64_t chunk = 0;        // entries per chunk, a multiple of tile_keys
  int max_chunks = 1;       // grid.y: chunks of the longest head
  int row_tiles = 0;        // grid.x: ceil(n * group / R)
  int shared_floats = 0;    // dynamic shared memory of one block, in floats
  size_t workspace_floats = 0;  // partials when split: n * n_heads * max_chunks * (head_dim + 2)
  KVEVICT_HOST_DEVICE bool split() const { return max_chunks > 1; }
};

struct RaggedAttentionArgs {
  DeviceKvLayerView kv;
  RaggedAttentionPlan plan;
  const float* queries = nullptr;  // [n][n_heads][head_dim]
  float* out = nullptr;            // [n][n_heads][head_dim]
  float* row_max = nullptr;        // [n][n_heads] or null
  float* row_sum = nullptr;        // [n][n_heads] or null
  float* workspace = nullptr;      // plan.workspace_floats floats when split
};

// What one thread keeps between phases (registers on the GPU): its row's running max and sum and
// its share of the row's accumulator (dims t % threads_per_row + k * threads_per_row).
struct RaggedThreadState {
  float m = -INFINITY, l = 0.0f;
  float acc[kRaggedMaxDimsPerThread] = {};
};

// A block's place: stored head (its length and first arena row), its rows [row0, row0 + rows)
// and its key range [begin, end).
struct RaggedBlock {
  int kv = 0, chunk = 0, row0 = 0, rows = 0;
  int64_t len = 0, base_row = 0, begin = 0, end = 0;
};

// Shared memory of a block: q [R][head_dim], k [tile_keys][head_dim + 1], s [R][tile_keys].
struct RaggedShared {
  float *q, *k, *s;
};
KVEVICT_HOST_DEVICE inline int ragged_shared_floats(int rows, int tile_keys, int head_dim) {
  return rows * head_dim + tile_keys * (head_dim + 1) + rows * tile_keys;
}
KVEVICT_HOST_DEVICE inline RaggedShared ragged_shared(const RaggedAttentionPlan& p, float* base) {
  float* k = base + p.rows_per_block * p.head_dim;
  return {base, k, k + p.tile_keys * (p.head_dim + 1)};
}

// Entries query i of a head of len entries sees (0 when none).
KVEVICT_HOST_DEVICE inline int64_t ragged_visible(int64_t len, int n, int i) {
  const int64_t v = len - n + i + 1;
  return v < 0 ? 0 : (v > len ? len : v);
}

KVEVICT_HOST_DEVICE inline RaggedBlock ragged_block(const RaggedAttentionArgs& a, int row_tile, int chunk, int kv) {
  const RaggedAttentionPlan& p = a.plan;
  RaggedBlock b;
  b.kv = kv;
  b.chunk = chunk;
  b.row0 = row_tile * p.rows_per_block;
  const int left = p.n * p.group - b.row0;
  b.rows = left < p.rows_per_block ? left : p.rows_per_block;
  const int64_t len = a.kv.length[kv];
  b.len = len;
  b.base_row = a.kv.base_row[kv];
  // Rows are i-major, so the last row has the largest visible range.
  const int64_t seen = b.rows > 0 ? ragged_visible(len, p.n, (b.row0 + b.rows - 1) / p.group) : 0;
  b.begin = static_cast<int64_t>(chunk) * p.chunk;
  const int64_t stop = b.begin + p.chunk;
  b.end = stop < seen ? stop : seen;
  if (b.end < b.begin) b.end = b.begin;
  return b;
}

// Thread t loads its share of the block's query rows (rows past the last are zero).
KVEVICT_HOST_DEVICE inline void ragged_load_queries(const RaggedAttentionArgs& a, const RaggedBlock& b,
                                                    RaggedShared s, int t) {
  const RaggedAttentionPlan& p = a.plan;
  for (int e = t; e < p.rows_per_block * p.head_dim; e += kRaggedThreads) {
    const int r = e / p.head_dim, d = e % p.head_dim, row = b.row0 + r;
    float x = 0.0f;
    if (r < b.rows) {
      const int i = row / p.group, h = b.kv * p.group + row % p.group;
      x = a.queries[(static_cast<size_t>(i) * p.n_heads + h) * p.head_dim + d];
    }
    s.q[e] = x;
  }
}

// 16 bytes of an arena (the kernels' vector load; memcpy on the host) and element k of them.
struct RaggedVector {
  uint32_t x[4];
};
KVEVICT_HOST_DEVICE inline RaggedVector ragged_load16(const void* at) {
  RaggedVector v;
#if defined(__CUDA_ARCH__)
  const uint4 u = *static_cast<const uint4*>(at);
  v.x[0] = u.x, v.x[1] = u.y, v.x[2] = u.z, v.x[3] = u.w;
#else
  memcpy(v.x, at, sizeof(v.x));
#endif
  return v;
}
// F16 widens with the hardware conversion on the device (exact, like kv_scalar's on the host: every
// f16 is an f32), which keeps the conversion from costing more than the load it follows.
KVEVICT_HOST_DEVICE inline float ragged_element(KvType type, const RaggedVector& v, int k) {
  if (type == KvType::F32) return kv_scalar::float_of(v.x[k & 3]);  // k < 4 for F32 (mask: provably in bounds)
  const uint16_t w = static_cast<uint16_t>(v.x[k >> 1] >> ((k & 1) * 16));  // little-endian words
  if (type == KvType::BF16) return kv_scalar::bf16_to_f32(w);
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(w));
#else
  return kv_scalar::f16_to_f32(w);
#endif
}

// Thread t (of `threads`) converts its share of a head's entries [t0, t0 + count) from `arena`
// (the head's entry 0 at base_row) into `tile` (stride hd + 1). Rows of a multiple of 16 bytes in
// a 16-byte aligned arena (head_dim % 8 == 0 for F16/BF16, % 4 for F32: the usual sizes) move 16
// bytes per thread and load, consecutive threads reading consecutive vectors; other rows move an
// element at a time. Entries past `stop` become zeros, so masked rows never carry NaNs.
KVEVICT_HOST_DEVICE inline void ragged_load_tile(const void* arena, KvType type, int64_t base_row, int hd, int64_t t0,
                                                 int64_t stop, int count, float* tile, int t, int threads) {
  const int bytes = static_cast<int>(device_kv_element_bytes(type)), per_vector = 16 / bytes;
  const bool vectors = (hd * bytes) % 16 == 0 && reinterpret_cast<uintptr_t>(arena) % 16 == 0;
  if (!vectors) {
    for (int e = t; e < count * hd; e += threads) {
      const int j = e / hd, d = e % hd;
      const int64_t entry = t0 + j;
      tile[j * (hd + 1) + d] = entry < stop ? device_kv_load(arena, type, base_row + entry, hd, d) : 0.0f;
    }
    return;
  }
  // Batches of kRaggedLoadBatch vectors: every load of a batch is issued before the first
  // conversion stores to shared memory, so a thread keeps that many DRAM requests in flight
  // (interleaved loads and stores would serialise them: the compiler cannot tell the pointers apart).
  const int row_vectors = hd / per_vector, total = count * row_vectors;
  for (int first = t; first < total; first += threads * kRaggedLoadBatch) {
    RaggedVector v[kRaggedLoadBatch];
    KVEVICT_RAGGED_UNROLL
    for (int b = 0; b < kRaggedLoadBatch; ++b) {
      const int e = first + b * threads, j = e / row_vectors;
      if (e < total && t0 + j < stop) {
        const size_t at = (static_cast<size_t>(base_row + t0 + j) * hd + (e % row_vectors) * per_vector) * bytes;
        v[b] = ragged_load16(static_cast<const char*>(arena) + at);
      }
    }
    KVEVICT_RAGGED_UNROLL
    for (int b = 0; b < kRaggedLoadBatch; ++b) {
      const int e = first + b * threads, j = e / row_vectors;
      if (e >= total) break;
      float* dst = tile + j * (hd + 1) + (e % row_vectors) * per_vector;
      const bool live = t0 + j < stop;
      KVEVICT_RAGGED_UNROLL
      for (int k = 0; k < 8; ++k) {
        if (k >= per_vector) break;
        dst[k] = live ? ragged_element(type, v[b], k) : 0.0f;
      }
    }
  }
}

KVEVICT_HOST_DEVICE inline float ragged_dot(const float* q, const float* k, int head_dim) {
  float dot = 0.0f;
  for (int d = 0; d < head_dim; ++d) dot += q[d] * k[d];
  return dot;
}

// Scores of the tile starting at entry t0: s[r][j], -inf where row r does not see entry t0 + j.
KVEVICT_HOST_DEVICE inline void ragged_scores(const RaggedAttentionArgs& a, const RaggedBlock& b, RaggedShared s,
                                              int64_t t0, int t) {
  const RaggedAttentionPlan& p = a.plan;
  for (int e = t; e < p.rows_per_block * p.tile_keys; e += kRaggedThreads) {
    const int r = e / p.tile_keys, j = e % p.tile_keys;
    const int64_t entry = t0 + j;
    const bool seen = r < b.rows && entry < b.end && entry < ragged_visible(b.len, p.n, (b.row0 + r) / p.group);
    s.s[e] = seen ? ragged_dot(s.q + r * p.head_dim, s.k + j * (p.head_dim + 1), p.head_dim) * p.scale : -INFINITY;
  }
}

// Online softmax step of thread t's row: the tile's max raises the running max; the sum and the
// accumulator are rescaled to it. A row that has seen nothing yet keeps m = -inf and factor 1.
KVEVICT_HOST_DEVICE inline void ragged_rescale(const RaggedAttentionPlan& p, RaggedShared s, int t,
                                               RaggedThreadState& st) {
  const float* row = s.s + (t / p.threads_per_row) * p.tile_keys;
  float m = st.m;
  for (int j = 0; j < p.tile_keys; ++j) m = row[j] > m ? row[j] : m;
  const float factor = st.m == -INFINITY ? 1.0f : expf(st.m - m);
  st.m = m;
  st.l *= factor;
  KVEVICT_RAGGED_UNROLL
  for (int k = 0; k < kRaggedMaxDimsPerThread; ++k) {
    if (k >= p.dims_per_thread) break;
    st.acc[k] *= factor;
  }
}

// Turns thread t's share of its row's scores into weights exp(score - m) (0 where masked, and
// for a row that has seen nothing): each exp once, by one of the row's threads.
KVEVICT_HOST_DEVICE inline void ragged_weights(const RaggedAttentionPlan& p, RaggedShared s, int t,
                                               const RaggedThreadState& st) {
  float* row = s.s + (t / p.threads_per_row) * p.tile_keys;
  for (int j = t % p.threads_per_row; j < p.tile_keys; j += p.threads_per_row)
    row[j] = st.m == -INFINITY ? 0.0f : expf(row[j] - st.m);
}

// Adds the tile's values (in s.k by now) times the row's weights to thread t's dims and sum.
KVEVICT_HOST_DEVICE inline void ragged_accumulate(const RaggedAttentionPlan& p, RaggedShared s, int t,
                                                  RaggedThreadState& st) {
  const float* row = s.s + (t / p.threads_per_row) * p.tile_keys;
  const int sub = t % p.threads_per_row;
  for (int j = 0; j < p.tile_keys; ++j) {
    const float w = row[j];
    st.l += w;
    const float* v = s.k + j * (p.head_dim + 1);
    KVEVICT_RAGGED_UNROLL
    for (int k = 0; k < kRaggedMaxDimsPerThread; ++k) {
      const int d = sub + k * p.threads_per_row;
      if (k >= p.dims_per_thread || d >= p.head_dim) break;
      st.acc[k] += w * v[d];
    }
  }
}

// The first stored head whose entries the plan's chunks do not cover, or -1 (launchers and the
// twin refuse such a view: a plan holds only while the lengths it was made for do not grow).
inline int ragged_uncovered_head(const RaggedAttentionPlan& p, const DeviceKvLayerView& v) {
  for (int h = 0; h < v.n_heads && h < kDeviceKvMaxHeads; ++h)
    if (v.length[h] > p.chunk * p.max_chunks) return h;
  return -1;
}

KVEVICT_HOST_DEVICE inline size_t ragged_partial_at(const RaggedAttentionPlan& p, size_t qh, int chunk) {
  return (qh * p.max_chunks + chunk) * (p.head_dim + 2);
}

// End of a block: thread t writes its row's partial for this chunk (split plans) or the
// normalised output and row statistics (one-chunk plans).
KVEVICT_HOST_DEVICE inline void ragged_epilogue(const RaggedAttentionArgs& a, const RaggedBlock& b, int t,
                                                const RaggedThreadState& st) {
  const RaggedAttentionPlan& p = a.plan;
  const int r = t / p.threads_per_row, sub = t % p.threads_per_row, row = b.row0 + r;
  if (r >= b.rows) return;
  const int i = row / p.group, h = b.kv * p.group + row % p.group;
  const size_t qh = static_cast<size_t>(i) * p.n_heads + h;
  if (p.split()) {
    float* part = a.workspace + ragged_partial_at(p, qh, b.chunk);
    if (sub == 0) {
      part[0] = st.m;
      part[1] = st.l;
    }
    KVEVICT_RAGGED_UNROLL
    for (int k = 0; k < kRaggedMaxDimsPerThread; ++k) {
      const int d = sub + k * p.threads_per_row;
      if (k >= p.dims_per_thread || d >= p.head_dim) break;
      part[2 + d] = st.acc[k];
    }
    return;
  }
  const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
  KVEVICT_RAGGED_UNROLL
  for (int k = 0; k < kRaggedMaxDimsPerThread; ++k) {
    const int d = sub + k * p.threads_per_row;
    if (k >= p.dims_per_thread || d >= p.head_dim) break;
    a.out[qh * p.head_dim + d] = st.acc[k] * inv;
  }
  if (sub == 0 && a.row_max) {
    a.row_max[qh] = st.m;
    a.row_sum[qh] = st.l;
  }
}

// Merge pass, one block per (query i, query head h), `threads` threads: the chunks the query saw
// are combined as m = max m_c, l = sum l_c exp(m_c - m), out = sum acc_c exp(m_c - m) / l. Only
// chunks the query saw are read (each of them holds at least one of its entries).
KVEVICT_HOST_DEVICE inline void ragged_merge(const RaggedAttentionArgs& a, int i, int h, int t, int threads) {
  const RaggedAttentionPlan& p = a.plan;
  const size_t qh = static_cast<size_t>(i) * p.n_heads + h;
  const int64_t seen = ragged_visible(a.kv.length[h / p.group], p.n, i);
  const int chunks = static_cast<int>((seen + p.chunk - 1) / p.chunk);
  float m = -INFINITY, l = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    const float mc = a.workspace[ragged_partial_at(p, qh, c)];
    m = mc > m ? mc : m;
  }
  for (int c = 0; c < chunks; ++c) {
    const float* part = a.workspace + ragged_partial_at(p, qh, c);
    if (part[0] != -INFINITY) l += part[1] * expf(part[0] - m);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = t; d < p.head_dim; d += threads) {
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) {
      const float* part = a.workspace + ragged_partial_at(p, qh, c);
      if (part[0] != -INFINITY) sum += part[2 + d] * expf(part[0] - m);
    }
    a.out[qh * p.head_dim + d] = sum * inv;
  }
  if (t == 0 && a.row_max) {
    a.row_max[qh] = m;
    a.row_sum[qh] = l;
  }
}

// ---- column sums: sum over block queries of the probability each entry got, per query head.
struct RaggedColumnPlan {
  int n = 0, n_heads = 0, n_kv = 0, group = 1, head_dim = 0;
  float scale = 1.0f;
  int tile_keys = 0;  // entries per block = threads per block (64, or 32 for head_dim > 128)
  int key_tiles = 0;  // grid.x = ceil(max_len / tile_keys)
  int max_len = 0;    // row stride of the output, >= every head's length
  int shared_floats = 0;  // k [tile_keys][head_dim + 1], q [kRaggedQueryTile][head_dim], stats [2][tile]
};
struct RaggedColumnArgs {
  DeviceKvLayerView kv;
  RaggedColumnPlan plan;
  const float* queries = nullptr;  // [n][n_heads][head_dim]
  const float* row_max = nullptr;  // [n][n_heads], from the attention
  const float* row_sum = nullptr;
  float* column_sums = nullptr;    // [n_heads][max_len]; entries past a head's length get 0
};

// The first stored head longer than the plan's row stride, or -1 (refused like the above).
inline int ragged_column_uncovered_head(const RaggedColumnPlan& p, const DeviceKvLayerView& v) {
  for (int h = 0; h < v.n_heads && h < kDeviceKvMaxHeads; ++h)
    if (v.length[h] > p.max_len) return h;
  return -1;
}

// Block (x = key tile, y = stored head kv), tile_keys threads, thread t owning entry t0 + t with
// t0 = x * tile_keys: the key tile is loaded once and serves the whole GQA group (keys are read
// once, not group times); for each query head of the group, query tiles from the first query that
// sees t0 stream through shared memory. Shared: k [tile_keys][head_dim + 1], q
// [kRaggedQueryTile][head_dim], stats [kRaggedQueryTile][2] (row max, row sum).
struct RaggedColumnShared {
  float *k, *q, *stats;
};
KVEVICT_HOST_DEVICE inline RaggedColumnShared ragged_column_shared(const RaggedColumnPlan& p, float* base) {
  float* q = base + p.tile_keys * (p.head_dim + 1);
  return {base, q, q + kRaggedQueryTile * p.head_dim};
}
// Writes entry `entry`'s sum (0 past the head's length, up to the row stride).
KVEVICT_HOST_DEVICE inline void ragged_column_store(const RaggedColumnArgs& a, int h, int64_t entry, int64_t len,
                                                    float sum) {
  if (entry < a.plan.max_len) a.column_sums[static_cast<size_t>(h) * a.plan.max_len + entry] = entry < len ? sum : 0.0f;
}

// First block query that sees entry t0 (queries before it see none of the tile).
KVEVICT_HOST_DEVICE inline int ragged_first_query(int64_t len, int n, int64_t entry) {
  const int64_t i = entry - (len - n);
  return i < 0 ? 0 : static_cast<int>(i);
}

// Thread t loads its share of queries [i0, i0 + kRaggedQueryTile) of head h and their statistics.
KVEVICT_HOST_DEVICE inline void ragged_column_load_queries(const RaggedColumnArgs& a, int h, int i0, float* q,
                                                           float* stats, int t) {
  const RaggedColumnPlan& p = a.plan;
  for (int e = t; e < kRaggedQueryTile * p.head_dim; e += p.tile_keys) {
    const int r = e / p.head_dim, d = e % p.head_dim, i = i0 + r;
    q[e] = i < p.n ? a.queries[(static_cast<size_t>(i) * p.n_heads + h) * p.head_dim + d] : 0.0f;
  }
  for (int r = t; r < kRaggedQueryTile; r += p.tile_keys) {
    const int i = i0 + r;
    const size_t qh = static_cast<size_t>(i) * p.n_heads + h;
    stats[2 * r] = i < p.n ? a.row_max[qh] : INFINITY;  // +inf max: weight 0
    stats[2 * r + 1] = i < p.n ? a.row_sum[qh] : 1.0f;
  }
}

// Thread t adds the probabilities that queries [i0, i0 + kRaggedQueryTile) gave its entry of a
// head of len entries: exp(score - row_max) / row_sum for the queries that see it.
KVEVICT_HOST_DEVICE inline float ragged_column_accumulate(const RaggedColumnPlan& p, int64_t len, int64_t entry,
                                                          int i0, const float* k_tile, const float* q,
                                                          const float* stats, int t) {
  if (entry >= len) return 0.0f;
  const int first = ragged_first_query(len, p.n, entry);
  float sum = 0.0f;
  for (int r = first > i0 ? first - i0 : 0; r < kRaggedQueryTile && i0 + r < p.n; ++r) {
    const float l = stats[2 * r + 1];
    if (l <= 0.0f) continue;
    const float s = ragged_dot(q + r * p.head_dim, k_tile + t * (p.head_dim + 1), p.head_dim) * p.scale;
    sum += expf(s - stats[2 * r]) / l;
  }
  return sum;
}

}  // namespace kvevict
