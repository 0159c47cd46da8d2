#pragma once
// Shared by the device KV cache tests: an independent reference (one std::vector per head,
// entries appended and erased like a list) and random operation sequences to drive it, the host
// twin and the device cache alike. The reference converts f32 with kv_from_f32, the host
// KVCache's bulk conversion (F16C / AVX-512 where built), not with the twin's scalar code.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_type.h"

namespace kvevict::device_kv_test {

// A row of f32 as the cache stores it, in 16-bit words (an F32 element is two words).
inline std::vector<uint16_t> stored_words(KvType type, const float* row, int d) {
  if (type == KvType::F32) {
    std::vector<uint16_t> w(2 * static_cast<size_t>(d));
    std::memcpy(w.data(), row, d * sizeof(float));
    return w;
  }
  std::vector<uint16_t> w(static_cast<size_t>(d));
  kv_from_f32(type, row, w.data(), static_cast<size_t>(d));
  return w;
}

struct ReferenceCache {
  struct Head {
    std::vector<std::vector<uint16_t>> keys, values;  // one row per entry
    std::vector<int32_t> positions;
  };
  DeviceKvGeometry g;
  std::vector<Head> heads;  // [layer * n_heads + head]

  explicit ReferenceCache(const DeviceKvGeometry& geometry)
      : g(geometry), heads(static_cast<size_t>(geometry.n_layers) * geometry.n_heads) {}
  Head& head(int l, int h) { return heads[static_cast<size_t>(l) * g.n_heads + h]; }
  const Head& head(int l, int h) const { return heads[static_cast<size_t>(l) * g.n_heads + h]; }

  void append(int l, int n, const float* k, const float* v, int64_t stride, const std::vector<int32_t>& first) {
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < g.n_heads; ++h) {
        const size_t at = static_cast<size_t>(i) * stride + static_cast<size_t>(h) * g.head_dim;
        head(l, h).keys.push_back(stored_words(g.type, k + at, g.head_dim));
        head(l, h).values.push_back(stored_words(g.type, v + at, g.head_dim));
        head(l, h).positions.push_back(first[h] + i);
      }
    }
  }
  // Erase semantics: everything not listed goes, the rest keeps its order.
  void keep(int l, const std::vector<std::vector<int>>& lists) {
    for (int h = 0; h < g.n_heads; ++h) {
      Head& old = head(l, h);
      Head next;
      for (int j : lists[h]) {
        next.keys.push_back(old.keys.at(j));
        next.values.push_back(old.values.at(j));
        next.positions.push_back(old.positions.at(j));
      }
      old = std::move(next);
    }
  }
  // Rows [first, first + rows) of one head overwritten (or appended past its end) from f32 rows.
  void write(int l, int h, int64_t first, int64_t rows, const float* k, const float* v, const int32_t* pos) {
    Head& hd = head(l, h);
    for (int64_t r = 0; r < rows; ++r) {
      const size_t t = static_cast<size_t>(first + r), at = static_cast<size_t>(r) * g.head_dim;
      if (t == hd.positions.size()) {
        hd.keys.emplace_back();
        hd.values.emplace_back();
        hd.positions.push_back(0);
      }
      hd.keys.at(t) = stored_words(g.type, k + at, g.head_dim);
      hd.values.at(t) = stored_words(g.type, v + at, g.head_dim);
      hd.positions.at(t) = pos[r];
    }
  }
  // The head flattened like DeviceKvHeadContents.
  std::vector<uint16_t> key_words(int l, int h) const { return flatten(head(l, h).keys); }
  std::vector<uint16_t> value_words(int l, int h) const { return flatten(head(l, h).values); }
  static std::vector<uint16_t> flatten(const std::vector<std::vector<uint16_t>>& rows) {
    std::vector<uint16_t> out;
    for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
    return out;
  }
};

struct Op {
  int layer = 0;
  bool append = true;
  int n = 0;
  int64_t stride = 0;
  std::vector<float> keys, values;
  std::vector<int32_t> first_positions;
  std::vector<std::vector<int>> keep;
};

// Values over f16's whole range and beyond: subnormals, normals, overflow to inf, exact zeros.
inline float random_value(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 9);
  switch (kind(rng)) {
    case 0: return normal(rng) * 1e-6f;  // f16 subnormal
    case 1: return normal(rng) * 1e5f;   // beyond 65504 now and then
    case 2: return 0.0f;
    case 3: return -0.0f;
    default: return normal(rng) * 4.0f;
  }
}

// A keep list for a head of `length` entries: all, none, a random subset, a suffix, a prefix,
// all but one, or a random subset in random order (a score-ordered list).
inline std::vector<int> random_keep(std::mt19937& rng, int length) {
  std::vector<int> out;
  const int mode = std::uniform_int_distribution<int>(0, 6)(rng);
  const int cut = length == 0 ? 0 : std::uniform_int_distribution<int>(0, length)(rng);
  std::bernoulli_distribution coin(0.5);
  for (int t = 0; t < length; ++t) {
    const bool keep = mode == 0 || ((mode == 2 || mode == 6) && coin(rng)) || (mode == 3 && t >= cut) || (mode == 4 && t < cut) ||
                      (mode == 5 && t != cut);
    if (keep) out.push_back(t);
  }
  if (mode == 6) std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// An append of `n` tokens to `layer` with keys and values drawn from `normal` (finite values, unlike
// random_value's), head h's first position first_positions[h].
inline Op normal_append(const DeviceKvGeometry& g, int layer, int n, std::vector<int32_t> first_positions,
                        std::mt19937& rng, std::normal_distribution<float>& normal) {
  Op op;
  op.layer = layer;
  op.append = true;
  op.n = n;
  op.stride = int64_t(g.n_heads) * g.head_dim;
  op.keys.resize(size_t(op.n) * op.stride);
  op.values.resize(op.keys.size());
  for (float& x : op.keys) x = normal(rng);
  for (float& x : op.values) x = normal(rng);
  op.first_positions = std::move(first_positions);
  return op;
}

// A keep of `layer` with a random_keep list per head of the lengths `layout` holds.
inline Op random_keep_op(std::mt19937& rng, const DeviceKvLayout& layout, int layer) {
  Op keep;
  keep.layer = layer;
  keep.append = false;
  for (int h = 0; h < layout.geometry().n_heads; ++h)
    keep.keep.push_back(random_keep(rng, static_cast<int>(layout.length(layer, h))));
  return keep;
}

// A write of `rows` random rows at `first` of one head: rows, then positions.
struct WriteOp {
  int layer = 0, head = 0;
  int64_t first = 0, rows = 0;
  std::vector<float> keys, values;
  std::vector<int32_t> positions;
};
// Random writes valid for the lengths of `lengths(l, h)`: inside the head, straddling its end, or
// extending it (first == length).
template <class Lengths>
inline std::vector<WriteOp> random_writes(const DeviceKvGeometry& g, int count, uint32_t seed, Lengths lengths) {
  std::mt19937 rng(seed);
  std::vector<WriteOp> out;
  for (int i = 0; i < count; ++i) {
    WriteOp w;
    w.layer = std::uniform_int_distribution<int>(0, g.n_layers - 1)(rng);
    w.head = std::uniform_int_distribution<int>(0, g.n_heads - 1)(rng);
    const int64_t len = lengths(w.layer, w.head);
    w.first = std::uniform_int_distribution<int64_t>(0, len)(rng);
    w.rows = std::uniform_int_distribution<int64_t>(0, 70)(rng);
    w.keys.resize(static_cast<size_t>(w.rows) * g.head_dim);
    w.values.resize(w.keys.size());
    for (float& x : w.keys) x = random_value(rng);
    for (float& x : w.values) x = random_value(rng);
    for (int64_t r = 0; r < w.rows; ++r) w.positions.push_back(std::uniform_int_distribution<int32_t>(0, 1 << 20)(rng));
    out.push_back(std::move(w));
  }
  return out;
}

// `count` operations on a cache of geometry g, valid for the lengths they produce.
inline std::vector<Op> random_ops(const DeviceKvGeometry& g, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> lengths(static_cast<size_t>(g.n_layers) * g.n_heads, 0);
  std::vector<Op> ops;
  for (int o = 0; o < count; ++o) {
    Op op;
    op.layer = std::uniform_int_distribution<int>(0, g.n_layers - 1)(rng);
    op.append = std::bernoulli_distribution(0.6)(rng);
    int* len = &lengths[static_cast<size_t>(op.layer) * g.n_heads];
    if (op.append) {
      op.n = std::uniform_int_distribution<int>(1, 40)(rng);
      op.stride = static_cast<int64_t>(g.n_heads) * g.head_dim + std::uniform_int_distribution<int>(0, 1)(rng) * 3;
      op.keys.resize(static_cast<size_t>(op.n) * op.stride);
      op.values.resize(op.keys.size());
      for (float& x : op.keys) x = random_value(rng);
      for (float& x : op.values) x = random_value(rng);
      for (int h = 0; h < g.n_heads; ++h) {
        op.first_positions.push_back(std::uniform_int_distribution<int32_t>(0, 1 << 20)(rng));
        len[h] += op.n;
      }
    } else {
      for (int h = 0; h < g.n_heads; ++h) {
        op.keep.push_back(random_keep(rng, len[h]));
        len[h] = static_cast<int>(op.keep.back().size());
      }
    }
    ops.push_back(std::move(op));
  }
  return ops;
}

// One operation on the twin and on the reference alike.
inline void apply(DeviceKvTwin& twin, ReferenceCache& ref, const Op& op) {
  if (op.append) {
    twin.append(op.layer, op.n, op.keys.data(), op.values.data(), op.stride, op.first_positions);
    ref.append(op.layer, op.n, op.keys.data(), op.values.data(), op.stride, op.first_positions);
  } else {
    twin.compact(op.layer, op.keep);
    ref.keep(op.layer, op.keep);
  }
}

}  // namespace kvevict::device_kv_test
