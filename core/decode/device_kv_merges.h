#pragma once
// The row merges of core/decode/row_merges.h over a device cache layer: the kernels of
// core/decode/cuda/device_kv_cache.cu (DeviceKvCache::nearest_kept_keys, value_norms, fold_rows)
// and the CPU twin (DeviceKvTwin) run these element bodies, so the CPU tests exercise the kernels'
// code.
//
// Search (every listed head of a layer at once): every kept key's norm first (one element per kept
// entry), then per evicted entry its cosine with every kept key of its head, best first in kept
// order (the twin: in order; the kernel: one block per evicted entry, a strided pass per thread
// and a block reduction by better_key_match, which gives the in-order answer).
// Value norms (Nearest's weights): one element per listed row of one head.
// Fold (one head): one element per (fold, column), in place: a fold reads rows that are no fold's
// target (row_merges.h), so no element reads what another writes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/decode/device_kv_elements.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/row_merges.h"

namespace kvevict {

// A layer's search over several heads at once: kept and evicted entries as arena rows, the heads'
// lists one after another; evicted entry e searches kept entries [kept_begin[e], kept_end[e]) (its
// head's) and answers a position relative to kept_begin[e].
struct DeviceKvNearestArgs {
  const void* keys = nullptr;  // the layer's key arena
  KvType type = KvType::F16;
  int head_dim = 0;
  const int64_t* kept_rows = nullptr;     // [n_kept]
  const int64_t* evicted_rows = nullptr;  // [n_evicted]
  const int32_t* kept_begin = nullptr;    // [n_evicted]
  const int32_t* kept_end = nullptr;      // [n_evicted]
  int32_t n_kept = 0, n_evicted = 0;
  double* kept_norms = nullptr;     // [n_kept], filled by the first pass
  KeptKeyMatch* matches = nullptr;  // [n_evicted]
};

// First pass, element j: the norm of kept key j.
KVEVICT_HOST_DEVICE inline void device_kv_kept_norm_element(const DeviceKvNearestArgs& a, int32_t j) {
  const int64_t row = a.kept_rows[j];
  a.kept_norms[j] = merge_key_norm([&](int i) { return device_kv_load(a.keys, a.type, row, a.head_dim, i); }, a.head_dim);
}

// The norm of evicted key e.
KVEVICT_HOST_DEVICE inline double device_kv_evicted_norm(const DeviceKvNearestArgs& a, int32_t e) {
  const int64_t row = a.evicted_rows[e];
  return merge_key_norm([&](int i) { return device_kv_load(a.keys, a.type, row, a.head_dim, i); }, a.head_dim);
}

// cos(evicted key e, kept key j) (j indexes kept_rows), with e's norm.
KVEVICT_HOST_DEVICE inline double device_kv_key_cosine(const DeviceKvNearestArgs& a, int32_t e, double norm_e, int32_t j) {
  const int64_t re = a.evicted_rows[e], rj = a.kept_rows[j];
  return merge_key_cosine([&](int i) { return device_kv_load(a.keys, a.type, re, a.head_dim, i); }, norm_e,
                          [&](int i) { return device_kv_load(a.keys, a.type, rj, a.head_dim, i); }, a.kept_norms[j],
                          a.head_dim);
}

struct DeviceKvValueNormArgs {
  const void* values = nullptr;  // the layer's value arena
  KvType type = KvType::F16;
  int head_dim = 0;
  int64_t base_row = 0;          // the head's region
  const int32_t* rows = nullptr;  // [n] head rows
  int32_t n = 0;
  double* norms = nullptr;        // [n]
};

// Element i: |v| of listed row i, unclamped (merge_row_norm).
KVEVICT_HOST_DEVICE inline void device_kv_value_norm_element(const DeviceKvValueNormArgs& a, int32_t i) {
  const int64_t row = a.base_row + a.rows[i];
  a.norms[i] = merge_row_norm([&](int c) { return device_kv_load(a.values, a.type, row, a.head_dim, c); }, a.head_dim);
}

struct DeviceKvFoldArgs {
  void* keys = nullptr;  // the layer's arenas
  void* values = nullptr;
  KvType type = KvType::F16;
  int head_dim = 0;
  int64_t base_row = 0;  // the head's region
  const RowFold* folds = nullptr;
  const RowFoldTerm* terms = nullptr;
  int32_t n_folds = 0;
  bool fold_keys = false, fold_values = false;
};

KVEVICT_HOST_DEVICE inline size_t device_kv_fold_elements(const DeviceKvFoldArgs& a) {
  return static_cast<size_t>(a.n_folds) * static_cast<size_t>(a.head_dim);
}

// Element e of [n_folds][head_dim]: column c of fold f's target, on each folded side.
KVEVICT_HOST_DEVICE inline void device_kv_fold_element(const DeviceKvFoldArgs& a, size_t e) {
  const int c = static_cast<int>(e % static_cast<size_t>(a.head_dim));
  const RowFold& f = a.folds[e / static_cast<size_t>(a.head_dim)];
  const size_t at = static_cast<size_t>(a.base_row + f.target) * static_cast<size_t>(a.head_dim) + static_cast<size_t>(c);
  if (a.fold_keys) {
    const float x = fold_row_element(
        f, a.terms, [&](int32_t row, int i) { return device_kv_load(a.keys, a.type, a.base_row + row, a.head_dim, i); }, c);
    device_kv_store(a.keys, a.type, at, x);
  }
  if (a.fold_values) {
    const float x = fold_row_element(
        f, a.terms, [&](int32_t row, int i) { return device_kv_load(a.values, a.type, a.base_row + row, a.head_dim, i); }, c);
    device_kv_store(a.values, a.type, at, x);
  }
}

// The index lists of a layer's search (the host's copy; DeviceKvNearestArgs points at them or at
// their device copies) and the arguments over `keys`.
struct DeviceKvNearestPlan {
  DeviceKvNearestArgs args;
  std::vector<int64_t> kept_rows, evicted_rows;
  std::vector<int32_t> kept_begin, kept_end;
  std::vector<size_t> first_match;  // searches[i]'s answers start at matches[first_match[i]]
  // The answers split per search (positions relative to each head's kept list).
  std::vector<std::vector<KeptKeyMatch>> split(std::span<const KeptKeyMatch> matches) const;
};

// The plans over the given arenas of `layer` in `layout` (device or host pointers; the outputs, and
// the value norms' and folds' lists, are set by the caller). std::invalid_argument for a head
// outside the layer, an index outside its head's length, an empty kept list with evicted entries,
// a fold whose terms leave the list, a term row that is some fold's target (a fold would read
// another's write) or a target folded twice.
DeviceKvNearestPlan plan_nearest_kept_keys(const DeviceKvLayout& layout, int layer, const void* keys,
                                           std::span<const KeptKeySearch> searches);
DeviceKvValueNormArgs plan_value_norms(const DeviceKvLayout& layout, int layer, int head, const void* values,
                                       std::span<const int> rows);
DeviceKvFoldArgs plan_fold_rows(const DeviceKvLayout& layout, int layer, int head, void* keys, void* values,
                                const RowFolds& folds);

}  // namespace kvevict
