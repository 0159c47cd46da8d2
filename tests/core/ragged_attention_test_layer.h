#pragma once
// Test helpers of the ragged attention tests (CPU and GPU): a random ragged layer in host arenas
// laid out as the device cache lays them (heads at spaced base rows, NaN words in between, so a
// read outside a head's rows poisons the result), and an independent double-precision reference:
// plain softmax attention per (query, head) over the rounded f32 copies, no tiles, no chunks.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/decode/device_kv_view.h"
#include "core/decode/kv_type.h"

namespace kvevict::ragged_test {

struct Layer {
  KvType type = KvType::F16;
  int head_dim = 0;
  std::vector<int64_t> lengths;
  std::vector<uint16_t> keys, values;          // arenas, [rows][row_words]
  std::vector<std::vector<float>> k32, v32;    // per head [len][head_dim], the stored values as f32
  DeviceKvLayerView view;                      // over keys / values (host pointers)
};

inline float rounded(KvType type, float x) {
  if (type == KvType::F16) return f16_to_f32_scalar(f32_to_f16_scalar(x));
  if (type == KvType::BF16) return bf16_to_f32_scalar(f32_to_bf16_scalar(x));
  return x;
}

// Stores x as element `index` of a word arena of `type` (F32 takes two words).
inline void put(std::vector<uint16_t>& arena, KvType type, size_t index, float x) {
  if (type == KvType::F32) {
    reinterpret_cast<float*>(arena.data())[index] = x;
  } else {
    arena[index] = type == KvType::F16 ? f32_to_f16_scalar(x) : f32_to_bf16_scalar(x);
  }
}

// Keys and values N(0,1) unless `fill` says otherwise (fill(head, entry, d, is_value)).
template <typename Fill>
Layer make_layer(KvType type, int head_dim, const std::vector<int64_t>& lengths, uint32_t seed, Fill fill) {
  Layer L;
  L.type = type;
  L.head_dim = head_dim;
  L.lengths = lengths;
  const int words = type == KvType::F32 ? 2 : 1;
  const int64_t gap = 5;  // rows between heads
  int64_t rows = gap;
  for (int64_t len : lengths) rows += len + gap;
  L.keys.assign(size_t(rows) * head_dim * words, 0x7FC0);  // NaN in every element type
  L.values = L.keys;
  L.view.n_heads = static_cast<int>(lengths.size());
  L.view.head_dim = head_dim;
  L.view.type = type;
  int64_t base = gap;
  for (size_t h = 0; h < lengths.size(); ++h) {
    L.view.base_row[h] = base;
    L.view.length[h] = lengths[h];
    L.k32.emplace_back(size_t(lengths[h]) * head_dim);
    L.v32.emplace_back(size_t(lengths[h]) * head_dim);
    for (int64_t t = 0; t < lengths[h]; ++t) {
      for (int d = 0; d < head_dim; ++d) {
        const size_t at = size_t(t) * head_dim + d, arena_at = size_t(base + t) * head_dim + d;
        const float k = rounded(type, fill(int(h), t, d, false)), v = rounded(type, fill(int(h), t, d, true));
        L.k32[h][at] = k;
        L.v32[h][at] = v;
        put(L.keys, type, arena_at, k);
        put(L.values, type, arena_at, v);
      }
    }
    base += lengths[h] + gap;
  }
  (void)seed;
  L.view.keys = L.keys.data();
  L.view.values = L.values.data();
  return L;
}

inline Layer random_layer(KvType type, int head_dim, const std::vector<int64_t>& lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  return make_layer(type, head_dim, lengths, seed, [&](int, int64_t, int, bool) { return normal(rng); });
}

inline std::vector<float> random_queries(int n, int n_heads, int head_dim, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> q(size_t(n) * n_heads * head_dim);
  for (float& x : q) x = normal(rng);
  return q;
}

struct Reference {
  std::vector<double> out, row_max, row_sum;   // as the kernels' outputs
  std::vector<std::vector<double>> columns;   // [n_heads][len of the head]
};

inline Reference reference(const Layer& L, const std::vector<float>& q, int n, int group) {
  const int hd = L.head_dim, n_heads = L.view.n_heads * group;
  const double scale = 1.0 / std::sqrt(double(hd));
  Reference R;
  R.out.assign(size_t(n) * n_heads * hd, 0.0);
  R.row_max.assign(size_t(n) * n_heads, -INFINITY);
  R.row_sum.assign(size_t(n) * n_heads, 0.0);
  for (int h = 0; h < n_heads; ++h) R.columns.emplace_back(size_t(L.lengths[h / group]), 0.0);
  for (int i = 0; i < n; ++i) {
    for (int h = 0; h < n_heads; ++h) {
      const int kv = h / group;
      const int64_t len = L.lengths[kv];
      const int64_t seen = std::max<int64_t>(0, std::min<int64_t>(len, len - n + i + 1));
      const size_t qh = size_t(i) * n_heads + h;
      const float* qv = q.data() + qh * hd;
      std::vector<double> s(static_cast<size_t>(seen));
      double m = -INFINITY;
      for (int64_t t = 0; t < seen; ++t) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += double(qv[d]) * L.k32[kv][size_t(t) * hd + d];
        s[t] = dot * scale;
        m = std::max(m, s[t]);
      }
      double l = 0;
      for (int64_t t = 0; t < seen; ++t) l += std::exp(s[t] - m);
      for (int64_t t = 0; t < seen; ++t) {
        const double p = std::exp(s[t] - m) / l;
        R.columns[h][t] += p;
        for (int d = 0; d < hd; ++d) R.out[qh * hd + d] += p * L.v32[kv][size_t(t) * hd + d];
      }
      R.row_max[qh] = m;
      R.row_sum[qh] = l;
    }
  }
  return R;
}

}  // namespace kvevict::ragged_test
