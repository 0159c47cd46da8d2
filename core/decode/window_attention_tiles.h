#pragma once
// The window attention signal A of one layer, computed from the device-resident KV cache
// (DeviceKvLayerView), written once as KVEVICT_HOST_DEVICE block phases:
// core/decode/cuda/window_attention.cu runs them as a kernel (a __syncthreads between phases) and
// window_attention_twin.cpp runs the same phases on the CPU over an emulated grid, so CPU tests
// exercise the code the GPU runs. Plans come from window_attention_twin.h.
//
// Problem (the device twin of compute_window_attention, core/engine/attention_signals.h). For
// stored head kv, query head g of its group (query head kv * group + g), window row w (post-RoPE
// query at position query_position0 + w) and entry t of the head:
//   A[kv][g][w][t] = softmax over the visible entries of (q . k_t) * scale,
// scale = 1/sqrt(head_dim) when `scaled`, else 1. Causal: entry t is visible iff its original
// position (view.positions, any order) is <= the query's position; not causal: every entry is.
// Invisible entries get probability 0; a row that sees nothing is all zeros (as the host does).
//
// Layout. queries: [W][n_heads][head_dim] f32 (the decoder's window_queries layout). out:
// [n_kv][group][W][max_len] f32, element ((kv * group + g) * W + w) * max_len + t; max_len (the
// plan's row stride) covers the longest head; entries at or past a head's length are written 0.
// Per KV head this is compute_window_attention's [G][W][T] with row stride max_len. Memory is the
// output, O(n_heads * W * max_len), and a split's two floats per row and chunk: there is never an
// S x S matrix.
//
// Work decomposition. The rows of stored head kv are its (g, w) pairs numbered r = g * W + w (the
// output's own order, so a block writes consecutive output rows). A block of kWindowThreads takes
// rows_per_block consecutive rows of one head and one chunk of its entries: grid = (row_tiles *
// chunks, n_kv), x = row_tile * chunks + chunk (the axis without a 65535 limit). Chunk c covers
// the entries [c * chunk, min((c + 1) * chunk, max_len)) (chunk a multiple of tile_keys, so key
// tiles never straddle two chunks). Thread t serves row t / threads_per_row and, within each key
// tile, the entries j = t % threads_per_row + k * threads_per_row.
//
// One chunk (chunks == 1, the whole row): one kernel, the phases below. Several (split along the
// cache, flash-decoding style, when the row tiles of a long head alone would leave most of the GPU
// idle: a prefill's window at 32K-128K): two kernels. The first runs pass 1 over its chunk, then
// the first thread of each row combines the row's thread partials and stores the chunk's (m, l)
// in `partials` ([n_kv][group * W][chunks][2], window_store_chunk_partial); the second
// (window_normalise_chunk) has every thread combine its row's chunk partials the same way and
// normalise its share of the block's chunk in place.
//
// A block's phases (barrier after each):
//   pass 1, per key tile of tile_keys entries of its chunk: load the tile into shared memory as f32
//     (ragged_load_tile: row stride head_dim + 1, so the row's threads, each on its own key, read
//     conflict-free; the tile serves all rows of the block, i.e. up to rows_per_block of the head's
//     group * W rows) | each thread scores its entries, writes the raw logit (-inf when masked)
//     into the output, and folds it into its own online (max, sum of exp);
//   then: each thread publishes its (max, sum) to shared memory |
//   pass 2: each thread combines its row's partials into the row's (m, l) and rewrites its share
//     of the row in place: exp(logit - m) / l, 0 for masked entries and past the head's length.
// Pass 2 rereads the logits pass 1 wrote (the block's own global writes, visible after the
// barrier) instead of recomputing the dots: the output must be written anyway.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/decode/device_kv_view.h"
#include "core/decode/ragged_attention_tiles.h"  // ragged_load_tile, ragged_dot

namespace kvevict {

inline constexpr int kWindowThreads = 128;             // threads per block
inline constexpr int kWindowMaxHeadDim = 256;
inline constexpr int kWindowMaxRows = 16;              // rows per block
inline constexpr int kWindowSharedBytes = 48 * 1024;   // dynamic shared memory without an opt-in

struct WindowAttentionPlan {
  int W = 0, n_kv = 0, group = 1, n_heads = 0, head_dim = 0;
  int64_t chunk = 0;        // entries per chunk, a multiple of tile_keys (>= max_len when one chunk)
  int chunks = 1;           // chunks per row: ceil(max_len / chunk), 1 when not split
  size_t partial_floats = 0;  // the split's (m, l) per row and chunk: n_kv * group * W * chunks * 2
  int query_position0 = 0;  // the position of window row 0
  bool causal = true;
  float scale = 1.0f;
  int64_t max_len = 0;      // the output's row stride, >= every head's length
  int rows_per_block = 1;   // R, a power of two <= kWindowMaxRows
  int threads_per_row = 0;  // kWindowThreads / R
  int tile_keys = 0;        // entries per shared key tile (64 or 32)
  int row_tiles = 0;        // grid.x: ceil(group * W / R) (0 when W == 0: nothing to launch)
  int shared_floats = 0;    // dynamic shared memory of one block, in floats
  size_t out_floats = 0;    // n_kv * group * W * max_len
};

struct WindowAttentionArgs {
  DeviceKvLayerView kv;
  WindowAttentionPlan plan;
  const float* queries = nullptr;  // [W][n_heads][head_dim]
  float* out = nullptr;            // [n_kv][group][W][max_len]
  float* partials = nullptr;       // plan.partial_floats floats when chunks > 1
};

// What a thread keeps across key tiles (registers on the GPU): the online max and sum of its
// share of its row's visible entries. m = -inf while it has seen none.
struct WindowThreadState {
  float m = -INFINITY, l = 0.0f;
};

// A block's place: stored head kv (length, first arena row), its rows [row0, row0 + rows) and its
// chunk of entries [k0, k1) (k1 <= max_len; [0, max_len) when not split).
struct WindowBlock {
  int kv = 0, row0 = 0, rows = 0, chunk = 0;
  int64_t len = 0, base_row = 0;
  int64_t k0 = 0, k1 = 0;
};

// Shared memory of a block: q [R][head_dim], k [tile_keys][head_dim + 1], partials [threads][2].
struct WindowShared {
  float *q, *k, *partial;
};
KVEVICT_HOST_DEVICE inline int window_shared_floats(int rows, int tile_keys, int head_dim) {
  return rows * head_dim + tile_keys * (head_dim + 1) + 2 * kWindowThreads;
}
KVEVICT_HOST_DEVICE inline WindowShared window_shared(const WindowAttentionPlan& p, float* base) {
  float* k = base + p.rows_per_block * p.head_dim;
  return {base, k, k + p.tile_keys * (p.head_dim + 1)};
}

// Block x (= row_tile * chunks + chunk) of stored head kv.
KVEVICT_HOST_DEVICE inline WindowBlock window_block(const WindowAttentionArgs& a, int x, int kv) {
  const WindowAttentionPlan& p = a.plan;
  WindowBlock b;
  b.kv = kv;
  const int row_tile = x / p.chunks;
  b.chunk = x % p.chunks;
  b.k0 = static_cast<int64_t>(b.chunk) * p.chunk;
  b.k1 = b.k0 + p.chunk < p.max_len ? b.k0 + p.chunk : p.max_len;
  b.row0 = row_tile * p.rows_per_block;
  const int left = p.group * p.W - b.row0;
  b.rows = left < p.rows_per_block ? left : p.rows_per_block;
  b.len = a.kv.length[kv];
  b.base_row = a.kv.base_row[kv];
  return b;
}

// The key tiles of a block's pass 1: from its chunk's first entry to the end of its chunk or its
// head, whichever comes first.
KVEVICT_HOST_DEVICE inline int64_t window_keys_end(const WindowBlock& b) { return b.k1 < b.len ? b.k1 : b.len; }

// Offset of row r (= g * W + w) of stored head kv in the output.
KVEVICT_HOST_DEVICE inline size_t window_out_row(const WindowAttentionPlan& p, int kv, int r) {
  return (static_cast<size_t>(kv) * p.group * p.W + static_cast<size_t>(r)) * static_cast<size_t>(p.max_len);
}

// Thread t loads its share of the block's query rows (rows past the block's last are zero).
KVEVICT_HOST_DEVICE inline void window_load_queries(const WindowAttentionArgs& a, const WindowBlock& b,
                                                    WindowShared s, int t) {
  const WindowAttentionPlan& p = a.plan;
  for (int e = t; e < p.rows_per_block * p.head_dim; e += kWindowThreads) {
    const int r = e / p.head_dim, d = e % p.head_dim, row = b.row0 + r;
    float x = 0.0f;
    if (r < b.rows) {
      const int g = row / p.W, w = row % p.W, h = b.kv * p.group + g;
      x = a.queries[(static_cast<size_t>(w) * p.n_heads + h) * p.head_dim + d];
    }
    s.q[e] = x;
  }
}

// Whether entry `entry` of the block's head is visible to window row w: the causal rule by
// original positions (any order), compared in 64 bits so query_position0 + w cannot overflow.
KVEVICT_HOST_DEVICE inline bool window_visible(const WindowAttentionArgs& a, const WindowBlock& b, int64_t entry,
                                               int w) {
  if (!a.plan.causal) return true;
  return static_cast<int64_t>(a.kv.positions[b.base_row + entry]) <= static_cast<int64_t>(a.plan.query_position0) + w;
}

// Pass 1 on the tile starting at entry t0 (keys in s.k): thread t scores its entries of its row,
// writes the logit (-inf when masked) to the output and folds it into its online max and sum.
KVEVICT_HOST_DEVICE inline void window_scores(const WindowAttentionArgs& a, const WindowBlock& b, WindowShared s,
                                              int64_t t0, int t, WindowThreadState& st) {
  const WindowAttentionPlan& p = a.plan;
  const int r = t / p.threads_per_row;
  if (r >= b.rows) return;
  const int row = b.row0 + r, w = row % p.W;
  float* out = a.out + window_out_row(p, b.kv, row);
  const int64_t end = window_keys_end(b);
  for (int j = t % p.threads_per_row; j < p.tile_keys; j += p.threads_per_row) {
    const int64_t entry = t0 + j;
    if (entry >= end) break;
    float x = -INFINITY;
    if (window_visible(a, b, entry, w)) {
      x = ragged_dot(s.q + r * p.head_dim, s.k + j * (p.head_dim + 1), p.head_dim) * p.scale;
      // Online softmax: a new max rescales the sum gathered so far (exp(-inf) never computed).
      if (x > st.m) {
        st.l = (st.m == -INFINITY ? 0.0f : st.l * expf(st.m - x)) + 1.0f;
        st.m = x;
      } else {
        st.l += expf(x - st.m);
      }
    }
    out[entry] = x;
  }
}

// Thread t publishes its partial (max, sum) for its row's threads to combine.
KVEVICT_HOST_DEVICE inline void window_publish(WindowShared s, int t, const WindowThreadState& st) {
  s.partial[2 * t] = st.m;
  s.partial[2 * t + 1] = st.l;
}

// Combines n online (max, sum) partials stored `stride` floats apart into one: the max of the
// maxima, and each sum rescaled to it (a partial that saw nothing, m = -inf, adds nothing).
KVEVICT_HOST_DEVICE inline WindowThreadState window_combine(const float* part, int n, int stride) {
  WindowThreadState c;
  for (int k = 0; k < n; ++k) c.m = part[k * stride] > c.m ? part[k * stride] : c.m;
  for (int k = 0; k < n; ++k)
    if (part[k * stride] != -INFINITY) c.l += part[k * stride + 1] * expf(part[k * stride] - c.m);
  return c;
}

// Rewrites the logits of row r's share [b.k0 + sub, b.k1) (every threads_per_row-th entry) in
// place: exp(logit - m) / l where visible, 0 where masked, past the head's length, or in a row
// that sees nothing.
KVEVICT_HOST_DEVICE inline void window_write_probabilities(const WindowAttentionArgs& a, const WindowBlock& b, int r,
                                                           int sub, WindowThreadState row) {
  const WindowAttentionPlan& p = a.plan;
  const float inv = row.l > 0.0f ? 1.0f / row.l : 0.0f;
  float* out = a.out + window_out_row(p, b.kv, b.row0 + r);
  for (int64_t e = b.k0 + sub; e < b.k1; e += p.threads_per_row) {
    float y = 0.0f;
    if (e < b.len && row.m != -INFINITY) {
      const float x = out[e];
      y = x == -INFINITY ? 0.0f : expf(x - row.m) * inv;
    }
    out[e] = y;
  }
}

// Pass 2 of one chunk: thread t combines its row's partials (every thread of the row the same way,
// so no further barrier) and normalises its share of the row in place.
KVEVICT_HOST_DEVICE inline void window_normalise(const WindowAttentionArgs& a, const WindowBlock& b, WindowShared s,
                                                 int t) {
  const WindowAttentionPlan& p = a.plan;
  const int r = t / p.threads_per_row, sub = t % p.threads_per_row;
  if (r >= b.rows) return;
  window_write_probabilities(a, b, r, sub, window_combine(s.partial + 2 * r * p.threads_per_row, p.threads_per_row, 2));
}

// Offset of the (m, l) of row `row` of stored head kv for chunk c in the partials.
KVEVICT_HOST_DEVICE inline size_t window_partial_at(const WindowAttentionPlan& p, int kv, int row, int c) {
  return ((static_cast<size_t>(kv) * p.group * p.W + static_cast<size_t>(row)) * p.chunks + c) * 2;
}

// Split, first kernel's end (after window_publish and a barrier): the first thread of each row
// combines the row's thread partials and stores them as the block's chunk's (m, l).
KVEVICT_HOST_DEVICE inline void window_store_chunk_partial(const WindowAttentionArgs& a, const WindowBlock& b,
                                                           WindowShared s, int t) {
  const WindowAttentionPlan& p = a.plan;
  const int r = t / p.threads_per_row;
  if (r >= b.rows || t % p.threads_per_row != 0) return;
  const WindowThreadState c = window_combine(s.partial + 2 * r * p.threads_per_row, p.threads_per_row, 2);
  float* at = a.partials + window_partial_at(p, b.kv, b.row0 + r, b.chunk);
  at[0] = c.m;
  at[1] = c.l;
}

// Split, second kernel: thread t combines its row's chunk partials (every thread the same way) and
// normalises its share of the block's chunk in place.
KVEVICT_HOST_DEVICE inline void window_normalise_chunk(const WindowAttentionArgs& a, const WindowBlock& b, int t) {
  const WindowAttentionPlan& p = a.plan;
  const int r = t / p.threads_per_row, sub = t % p.threads_per_row;
  if (r >= b.rows) return;
  const WindowThreadState row = window_combine(a.partials + window_partial_at(p, b.kv, b.row0 + r, 0), p.chunks, 2);
  window_write_probabilities(a, b, r, sub, row);
}


// The first stored head longer than the plan's row stride, or -1 (the twin and the launcher
// refuse such a view: a plan holds only while the lengths it was made for do not outgrow it).
inline int window_uncovered_head(const WindowAttentionPlan& p, const DeviceKvLayerView& v) {
  for (int h = 0; h < v.n_heads && h < kDeviceKvMaxHeads; ++h)
    if (v.length[h] > p.max_len) return h;
  return -1;
}

}  // namespace kvevict
