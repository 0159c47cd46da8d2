#pragma once
// SpindleKV's codebook rule for an appended entry (spec policies.md §4.2; the storage is
// CodebookHead, kv_cache.h), written once as KVEVICT_HOST_DEVICE element bodies: the host KVCache
// (append_codebook_entry, reconstruct_keys/values), the device cache's CPU twin (DeviceKvTwin) and
// its kernel (core/decode/cuda/device_kv_codebook.cu) all run them, so a decoded entry gets the
// same code, norm and reconstruction, bit for bit, wherever it is appended.
//
// For a new key (value) x of a codebook head, at position p:
//   pre = RoPE^-1(x, p) for a key (codes are pre-RoPE), x for a value;
//   m = |pre| (double, summed in order), unit = pre / m (zero stays zero);
//   its code = the code of highest cosine codebook_dot(code, unit) > theta, ties to the lower
//   index (a NaN never wins); none: unit becomes a new code at the end of the book;
//   stored row = RoPE(code * m, p) for a key, code * m for a value, rounded to the cache's KvType.
// Products that feed a sum are written as explicit fma / fmaf (rope_rotate_pair_*), which no
// compiler fuses or splits further: the host builds with -march=native, nvcc fuses by default.
//
// On the device (DeviceCodebookAppendArgs): a layer holds one book per stored head, or one shared
// by all its heads (codebook_scope = per_layer_across_heads). A book's heads run in head order and
// a head's rows in order, keys then values, as the host appends them (the first copy of an unfolded
// KV head may add a code that the next ones then match). Every appended row logs its CodebookEntry,
// which the host reads back to catch up (DeviceKvMirror::sync_host).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/decode/device_kv_elements.h"
#include "core/decode/rope.h"
#include "core/util/host_device.h"

namespace kvevict {

// What a codebook head stores for one entry (CodebookHead's per-entry arrays).
struct CodebookEntry {
  int32_t key_index = -1;
  float key_norm = 0.0f;
  int32_t value_index = -1;
  float value_norm = 0.0f;
};

// cos and sin of pair i at `position` in `rope` (the caller keeps position inside the table).
KVEVICT_HOST_DEVICE inline void codebook_rope_angle(const RopeTableView& rope, int32_t position, int i, float* c,
                                                    float* s) {
  const size_t k = static_cast<size_t>(position) * rope.half + i;
  *c = rope.cos[k];
  *s = rope.sin[k];
}

// out = RoPE^-1(key, position): the pre-RoPE key a code is matched with.
KVEVICT_HOST_DEVICE inline void codebook_key_pre_rope(const float* key, const RopeTableView& rope, int32_t position,
                                                      float* out) {
  for (int i = 0; i < 2 * rope.half; ++i) out[i] = key[i];
  for (int i = 0; i < rope.half; ++i) {
    int a = 0, b = 0;
    rope_pair_elements(rope.style, i, rope.half, &a, &b);
    float c = 0, s = 0;
    codebook_rope_angle(rope, position, i, &c, &s);
    rope_rotate_pair_back(&out[a], &out[b], c, s);
  }
}

// unit = x / |x| (zero stays zero); returns |x|, summed in double in element order.
KVEVICT_HOST_DEVICE inline float codebook_unit(const float* x, int d, float* unit) {
  double s = 0;
  for (int i = 0; i < d; ++i) s = fma(static_cast<double>(x[i]), static_cast<double>(x[i]), s);
  const double m = sqrt(s);
  for (int i = 0; i < d; ++i) unit[i] = m > 0 ? static_cast<float>(x[i] / m) : 0.0f;
  return static_cast<float>(m);
}

// The cosine of a unit vector with a code (both unit or zero), in f32, in element order.
KVEVICT_HOST_DEVICE inline float codebook_dot(const float* code, const float* unit, int d) {
  float dot = 0.0f;
  for (int i = 0; i < d; ++i) dot = fmaf(code[i], unit[i], dot);
  return dot;
}

// Whether code c (cosine `dot`) beats the best so far (best < 0: none yet): above theta, then a
// higher cosine, then a lower index. In any order of comparison this gives the in-order scan's
// answer (the first code of the highest cosine above theta).
KVEVICT_HOST_DEVICE inline bool codebook_match_beats(float dot, int32_t c, double theta, float best_dot, int32_t best) {
  if (!(dot > theta)) return false;
  if (best < 0) return true;
  return dot > best_dot || (dot == best_dot && c < best);
}

// Pair i of RoPE(code * norm, position): the pair's elements a, b and their values.
KVEVICT_HOST_DEVICE inline void codebook_key_pair(const float* code, float norm, const RopeTableView& rope,
                                                  int32_t position, int i, int* a, int* b, float* x0, float* x1) {
  rope_pair_elements(rope.style, i, rope.half, a, b);
  *x0 = code[*a] * norm;
  *x1 = code[*b] * norm;
  float c = 0, s = 0;
  codebook_rope_angle(rope, position, i, &c, &s);
  rope_rotate_pair_forward(x0, x1, c, s);
}

// ---- the device's append: one decoded block through a layer's books.
struct DeviceCodebookAppendArgs {
  const float* src_keys = nullptr;  // [rows][src_stride] f32, post-RoPE, head h at column h * head_dim
  const float* src_values = nullptr;
  int64_t src_stride = 0;
  void* key_arena = nullptr;  // the layer's arenas: the block's rows are overwritten there
  void* value_arena = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0, n_heads = 0, rows = 0;
  int32_t first_position = 0;                    // the block's row r has position first_position + r
  int64_t dst_row[kDeviceKvMaxHeads] = {};       // arena row of the block's row 0 in head h
  double theta_key[kDeviceKvMaxHeads] = {};
  double theta_value[kDeviceKvMaxHeads] = {};
  bool shared = false;                           // one book for every head; else book h is head h's
  float* key_codes = nullptr;                    // [books][code_capacity][head_dim]
  float* value_codes = nullptr;
  int64_t code_capacity = 0;
  int32_t* key_count = nullptr;                  // [books]: codes in use
  int32_t* value_count = nullptr;
  CodebookEntry* log = nullptr;                  // [n_heads][log_capacity]
  int64_t log_capacity = 0;
  int64_t log_first = 0;                         // the block's row r logs at log_first + r
  RopeTableView rope;                            // covers every position of the block
};

KVEVICT_HOST_DEVICE inline int device_codebook_books(const DeviceCodebookAppendArgs& a) {
  return a.shared ? 1 : a.n_heads;
}
KVEVICT_HOST_DEVICE inline int device_codebook_first_head(const DeviceCodebookAppendArgs& a, int book) {
  return a.shared ? 0 : book;
}
KVEVICT_HOST_DEVICE inline int device_codebook_end_head(const DeviceCodebookAppendArgs& a, int book) {
  return a.shared ? a.n_heads : book + 1;
}
KVEVICT_HOST_DEVICE inline float* device_codebook_codes(const DeviceCodebookAppendArgs& a, bool key, int book) {
  return (key ? a.key_codes : a.value_codes) + static_cast<size_t>(book) * a.code_capacity * a.head_dim;
}
KVEVICT_HOST_DEVICE inline int32_t* device_codebook_count(const DeviceCodebookAppendArgs& a, bool key, int book) {
  return (key ? a.key_count : a.value_count) + book;
}

// The vector matched for row r of head h (a key: pre-RoPE) made a unit vector in `unit` (`scratch`
// holds head_dim floats); returns its norm. One thread's work.
KVEVICT_HOST_DEVICE inline float device_codebook_row_unit(const DeviceCodebookAppendArgs& a, int h, int r, bool key,
                                                         float* scratch, float* unit) {
  const float* src = (key ? a.src_keys : a.src_values) + static_cast<size_t>(r) * a.src_stride +
                     static_cast<size_t>(h) * a.head_dim;
  if (!key) return codebook_unit(src, a.head_dim, unit);
  codebook_key_pre_rope(src, a.rope, a.first_position + r, scratch);
  return codebook_unit(scratch, a.head_dim, unit);
}

// The row's code chosen (best: a matched code, or -1 for none): a new code is appended from `unit`
// when none matched (index -1 when the book is full: the host planned too little room, and the
// catch-up refuses the entry); the entry is logged. Returns the code index. One thread's work.
KVEVICT_HOST_DEVICE inline int32_t device_codebook_commit(const DeviceCodebookAppendArgs& a, int book, int h, int r,
                                                         bool key, int32_t best, const float* unit, float norm) {
  if (best < 0) {
    int32_t* count = device_codebook_count(a, key, book);
    if (*count < a.code_capacity) {
      float* code = device_codebook_codes(a, key, book) + static_cast<size_t>(*count) * a.head_dim;
      for (int i = 0; i < a.head_dim; ++i) code[i] = unit[i];
      best = (*count)++;
    }
  }
  CodebookEntry& e = a.log[static_cast<size_t>(h) * a.log_capacity + a.log_first + r];
  if (key) {
    e.key_index = best;
    e.key_norm = norm;
  } else {
    e.value_index = best;
    e.value_norm = norm;
  }
  return best;
}

// Elements of a row's reconstruction: head_dim / 2 pairs of a key, head_dim elements of a value.
KVEVICT_HOST_DEVICE inline int device_codebook_row_elements(const DeviceCodebookAppendArgs& a, bool key) {
  return key ? a.head_dim / 2 : a.head_dim;
}

// Element i of row r of head h's stored reconstruction from code `index` (>= 0) and `norm`.
KVEVICT_HOST_DEVICE inline void device_codebook_store_element(const DeviceCodebookAppendArgs& a, int book, int h,
                                                             int r, bool key, int32_t index, float norm, int i) {
  if (index < 0) return;  // no room was left for its code: the catch-up refuses the entry
  const float* code = device_codebook_codes(a, key, book) + static_cast<size_t>(index) * a.head_dim;
  const size_t row = static_cast<size_t>(a.dst_row[h] + r) * a.head_dim;
  if (!key) {
    device_kv_store(a.value_arena, a.type, row + i, code[i] * norm);
    return;
  }
  int e0 = 0, e1 = 0;
  float x0 = 0, x1 = 0;
  codebook_key_pair(code, norm, a.rope, a.first_position + r, i, &e0, &e1, &x0, &x1);
  device_kv_store(a.key_arena, a.type, row + e0, x0);
  device_kv_store(a.key_arena, a.type, row + e1, x1);
}

}  // namespace kvevict
