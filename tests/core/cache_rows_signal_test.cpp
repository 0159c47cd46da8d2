// The cached rows a decoder hands to device scoring (core/decode/cache_rows_signal.h): the kernels'
// element bodies run by their CPU twin over a DeviceKvTwin, against an independent reference (the
// rows each head holds after random appends and keeps, device_kv_test_ops.h, converted to f32 and
// transposed here; their norms summed here in double, rounded once), for every KvType and ragged
// heads (empty ones included).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/decode/cache_rows_signal.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_type_scalar.h"
#include "core/decode/rope.h"
#include "core/engine/model_signals.h"
#include "core/model/model_config.h"
#include "device_kv_test_ops.h"

namespace kvevict {
namespace {

using device_kv_test::Op;
using device_kv_test::random_ops;
using device_kv_test::ReferenceCache;

using device_kv_test::apply;

// Head h's rows of one side as [d][T] f32, from the reference's stored words.
std::vector<float> transposed(const std::vector<std::vector<uint16_t>>& rows, KvType type, int d) {
  const size_t T = rows.size();
  std::vector<float> out(static_cast<size_t>(d) * T);
  for (size_t t = 0; t < T; ++t) {
    const std::vector<float> row = device_kv_words_to_f32(type, rows[t]);
    for (int i = 0; i < d; ++i) out[static_cast<size_t>(i) * T + t] = row[static_cast<size_t>(i)];
  }
  return out;
}

// The L2 norm of each of head h's rows of one side, from the reference's stored words: the squares
// summed in double in element order, the root rounded once to float.
std::vector<float> row_norms_of(const std::vector<std::vector<uint16_t>>& rows, KvType type) {
  std::vector<float> out;
  for (const auto& words : rows) {
    double s = 0;
    for (float x : device_kv_words_to_f32(type, words)) s += double(x) * double(x);
    out.push_back(static_cast<float>(std::sqrt(s)));
  }
  return out;
}

class CacheRowsSignalTypes : public ::testing::TestWithParam<KvType> {};

TEST_P(CacheRowsSignalTypes, TwinHandsEachHeadItsRowsTransposed) {
  for (int head_dim : {6, 64}) {
    const DeviceKvGeometry g{2, 5, head_dim, GetParam()};
    DeviceKvTwin twin(g, {.row_quantum = 4, .growth = 1.25});
    ReferenceCache ref(g);
    int64_t empty_heads = 0, ragged_layers = 0;
    for (const Op& op : random_ops(g, 60, 23u + static_cast<uint32_t>(head_dim))) {
      apply(twin, ref, op);
      if (op.append) continue;
      const int l = op.layer;
      CacheRowsHost host;
      const CacheRowsSignal s = cache_rows_twin(twin.layer_view(l), {true, true, true}, host);
      ASSERT_EQ(s.n_heads(), g.n_heads);
      EXPECT_FALSE(s.on_device);
      EXPECT_EQ(s.head_dim, head_dim);
      int64_t offset = 0;
      bool ragged = false;
      for (int h = 0; h < g.n_heads; ++h) {
        const auto& head = ref.head(l, h);
        const int64_t T = static_cast<int64_t>(head.positions.size());
        empty_heads += T == 0;
        ragged = ragged || T != static_cast<int64_t>(ref.head(l, 0).positions.size());
        ASSERT_EQ(s.length[h], T) << "layer " << l << " head " << h;
        ASSERT_EQ(s.offset[h], offset) << "heads packed one after another";
        const std::vector<float> k = transposed(head.keys, g.type, head_dim), v = transposed(head.values, g.type, head_dim);
        for (size_t x = 0; x < k.size(); ++x) {
          // Bitwise: the same words converted the same way (NaN-free inputs; -0.0 kept).
          ASSERT_EQ(std::memcmp(&k[x], s.keys + offset + static_cast<int64_t>(x), sizeof(float)), 0)
              << "key x " << x << " layer " << l << " head " << h;
          ASSERT_EQ(std::memcmp(&v[x], s.values + offset + static_cast<int64_t>(x), sizeof(float)), 0)
              << "value x " << x << " layer " << l << " head " << h;
        }
        ASSERT_EQ(s.norm_offset(h), offset / head_dim);
        const std::vector<float> kn = row_norms_of(head.keys, g.type), vn = row_norms_of(head.values, g.type);
        for (int64_t t = 0; t < T; ++t) {
          ASSERT_EQ(std::memcmp(&kn[t], s.key_norms + s.norm_offset(h) + t, sizeof(float)), 0)
              << "key norm " << t << " layer " << l << " head " << h;
          ASSERT_EQ(std::memcmp(&vn[t], s.value_norms + s.norm_offset(h) + t, sizeof(float)), 0)
              << "value norm " << t << " layer " << l << " head " << h;
        }
        offset += head_dim * T;
      }
      EXPECT_EQ(static_cast<int64_t>(host.keys.size()), offset);
      EXPECT_EQ(static_cast<int64_t>(host.key_norms.size()), offset / head_dim);
      ragged_layers += ragged;
    }
    EXPECT_GT(ragged_layers, 0) << "the operations never left a layer's heads of different lengths";
    EXPECT_GT(empty_heads, 0) << "the operations never emptied a head";
  }
}

// K_pre: each stored key rotated back by its entry's position with the RoPE table handed over,
// against a reference that rotates the reference's stored words in double with the table's own
// cos and sin (so only the f32 arithmetic differs: |err| <= a few ulps of |x0| + |x1|), for both
// pairing conventions; the control rotates by the next position and must differ.
TEST_P(CacheRowsSignalTypes, KeysBeforeRopeAreTheKeysRotatedBackByTheirPositions) {
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const int head_dim = 16, half = head_dim / 2;
    const DeviceKvGeometry g{2, 3, head_dim, GetParam()};
    DeviceKvTwin twin(g, {.row_quantum = 4, .growth = 1.25});
    ReferenceCache ref(g);
    ModelConfig config;
    config.head_dim = head_dim;
    config.rope_style = style;
    Rope rope(config);
    rope.reserve((1 << 20) + 64);  // random_ops' positions start below 2^20 (its appends add fewer than 64)
    const RopeTableView table = rope.table();
    int64_t compared = 0, control_differs = 0;
    for (const Op& op : random_ops(g, 30, 7u + static_cast<uint32_t>(style))) {
      apply(twin, ref, op);
      if (op.append) continue;
      const int l = op.layer;
      CacheRowsHost host;
      const CacheRowsSignal s = cache_rows_twin(twin.layer_view(l), {.keys_pre_rope = true}, host, table);
      EXPECT_EQ(s.keys, nullptr) << "not asked for";
      if (host.keys_pre_rope.empty()) continue;  // every head of the layer empty
      ASSERT_NE(s.keys_pre_rope, nullptr);
      for (int h = 0; h < g.n_heads; ++h) {
        const auto& head = ref.head(l, h);
        const size_t T = head.positions.size();
        for (size_t t = 0; t < T; ++t) {
          const std::vector<float> k = device_kv_words_to_f32(g.type, head.keys[t]);
          for (int pair = 0; pair < half; ++pair) {
            int a = 0, b = 0;
            rope_pair_elements(style, pair, half, &a, &b);
            for (int shift : {0, 1}) {
              const size_t at = size_t(head.positions[t] + shift) * half + pair;
              const double c = table.cos[at], sn = table.sin[at];
              const double want_a = k[a] * c + k[b] * sn, want_b = k[b] * c - k[a] * sn;
              const float got_a = s.keys_pre_rope[s.offset[h] + int64_t(a) * int64_t(T) + int64_t(t)];
              const float got_b = s.keys_pre_rope[s.offset[h] + int64_t(b) * int64_t(T) + int64_t(t)];
              if (!std::isfinite(want_a) || !std::isfinite(want_b)) continue;  // f16 overflowed to inf
              const double tol = 4e-7 * (std::abs(k[a]) + std::abs(k[b])) + 1e-38;
              const bool close = std::abs(got_a - want_a) <= tol && std::abs(got_b - want_b) <= tol;
              if (shift == 0) {
                ASSERT_TRUE(close) << "layer " << l << " head " << h << " entry " << t << " pair " << pair << ": "
                                   << got_a << ", " << got_b << " want " << want_a << ", " << want_b;
                ++compared;
              } else {
                control_differs += !close;
              }
            }
          }
        }
      }
    }
    EXPECT_GT(compared, 1000);
    EXPECT_GT(control_differs, compared / 2) << "rotating by the next position went unseen";
  }
  // Refused: an odd head_dim, a table of another size, no positions.
  const DeviceKvGeometry odd{1, 1, 5, GetParam()};
  DeviceKvTwin twin(odd);
  ModelConfig config;
  config.head_dim = 6;
  Rope rope(config);
  rope.reserve(4);
  CacheRowsHost host;
  EXPECT_THROW(cache_rows_twin(twin.layer_view(0), {.keys_pre_rope = true}, host, rope.table()), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CacheRowsSignalTypes, ::testing::Values(KvType::F32, KvType::F16, KvType::BF16));

// The projected value norms (out_norm_l1, projected_value_norms.h) against the host's own
// computation, output_norms_l1 (model_signals.h: W_o transposed, the dot products vectorised over
// the output features), from the values each head holds after random appends and keeps, bit for
// bit. W_o is given both ways the element reads it: as the host's f32 slices [n_heads][dim][d] and
// as the decoder's F16 W_o [dim][n_heads * d] (whose values, widened, are the slices' here), so the
// strides of both layouts are checked. A control reads the next query head's slice and must differ.
TEST_P(CacheRowsSignalTypes, ProjectedValueNormsAreTheHostsThroughEachQueryHeadsSlice) {
  for (int head_dim : {6, 64}) {
    const int group = 2, dim = 37;
    const DeviceKvGeometry g{2, 3, head_dim, GetParam()};
    const int n_heads = g.n_heads * group, q_dim = n_heads * head_dim;
    std::mt19937 rng(41u + static_cast<uint32_t>(head_dim));
    std::normal_distribution<float> normal(0.0f, 0.5f);
    // W_o in f16 words ([dim][q_dim], the decoder's), and the same values as f32 slices.
    std::vector<uint16_t> wo_f16(static_cast<size_t>(dim) * q_dim);
    std::vector<float> slices(wo_f16.size());
    for (int i = 0; i < dim; ++i)
      for (int c = 0; c < q_dim; ++c) {
        const uint16_t w = kv_scalar::f32_to_f16(normal(rng));
        wo_f16[static_cast<size_t>(i) * q_dim + c] = w;
        const int q = c / head_dim, b = c % head_dim;
        slices[(static_cast<size_t>(q) * dim + i) * head_dim + b] = kv_scalar::f16_to_f32(w);
      }
    const OutputProjectionView as_slices{slices.data(), KvType::F32, dim, group, head_dim,
                                         static_cast<int64_t>(dim) * head_dim};
    const OutputProjectionView as_device{wo_f16.data(), KvType::F16, dim, group, q_dim, head_dim};
    DeviceKvTwin twin(g, {.row_quantum = 4, .growth = 1.25});
    ReferenceCache ref(g);
    int64_t checked = 0, differs = 0;
    for (const Op& op : random_ops(g, 40, 57u + static_cast<uint32_t>(head_dim))) {
      apply(twin, ref, op);
      const int l = op.layer;
      CacheRowsHost from_slices, from_device;
      const CacheRowsSignal s = cache_rows_twin(twin.layer_view(l), {.out_norms_l1 = true}, from_slices, {}, as_slices);
      const CacheRowsSignal w = cache_rows_twin(twin.layer_view(l), {.out_norms_l1 = true}, from_device, {}, as_device);
      ASSERT_EQ(s.group, group);
      EXPECT_EQ(s.keys, nullptr);
      EXPECT_EQ(s.values, nullptr);
      ASSERT_EQ(from_slices.out_norms_l1.size(), from_device.out_norms_l1.size());
      EXPECT_TRUE(from_slices.out_norms_l1.empty() ||  // bitwise (infinite rows' norms may be NaN)
                  std::memcmp(from_slices.out_norms_l1.data(), from_device.out_norms_l1.data(),
                              from_slices.out_norms_l1.size() * sizeof(float)) == 0)
          << "the decoder's layout reads the slices' values";
      int64_t packed = 0;
      for (int h = 0; h < g.n_heads; ++h) {
        const auto& head = ref.head(l, h);
        const int T = static_cast<int>(head.positions.size());
        ASSERT_EQ(s.out_norm_offset(h), packed);
        std::vector<float> rows;  // [T][d] f32
        for (const auto& words : head.values) {
          const std::vector<float> r = device_kv_words_to_f32(g.type, words);
          rows.insert(rows.end(), r.begin(), r.end());
        }
        std::vector<float> expected(static_cast<size_t>(group) * T), next(expected.size());
        output_norms_l1(slices.data(), dim, h, group, head_dim, rows.data(), T, expected.data());
        if (T > 0) {
          ASSERT_EQ(std::memcmp(expected.data(), s.out_norms_l1 + packed, expected.size() * sizeof(float)), 0)
              << "layer " << l << " head " << h;
          // The control: the next KV head's group of slices, on the entries whose norm is finite and
          // not 0 (the operations' values reach f16's infinities, whose norms are inf through any slice).
          output_norms_l1(slices.data(), dim, (h + 1) % g.n_heads, group, head_dim, rows.data(), T, next.data());
          bool comparable = false, differ = false;
          for (size_t x = 0; x < expected.size(); ++x)
            if (std::isfinite(expected[x]) && expected[x] != 0.0f) {
              comparable = true;
              differ = differ || next[x] != s.out_norms_l1[packed + static_cast<int64_t>(x)];
            }
          checked += comparable;
          differs += comparable && differ;
        }
        packed += static_cast<int64_t>(group) * T;
      }
      EXPECT_EQ(static_cast<int64_t>(from_slices.out_norms_l1.size()), packed);
    }
    EXPECT_GT(checked, 0);
    EXPECT_EQ(differs, checked) << "another head's slice gave the same norms";
  }
}

// The projected value norms' plan refuses what the kernel cannot run.
TEST(CacheRowsSignal, ProjectedValueNormsRefuseWhatTheKernelCannotRun) {
  DeviceKvLayerView v;
  v.n_heads = 1;
  v.head_dim = 8;
  v.length[0] = 2;
  std::vector<float> w(64 * 8 * 2);
  CacheRowsArgs a = plan_cache_rows(v, nullptr, nullptr);
  const OutputProjectionView ok{w.data(), KvType::F32, 64, 2, 8, 64 * 8};
  EXPECT_NO_THROW(plan_cache_out_norms_l1(a, ok, nullptr));
  OutputProjectionView bad = ok;
  bad.group = 0;
  EXPECT_THROW(plan_cache_out_norms_l1(a, bad, nullptr), std::invalid_argument);
  bad = ok;
  bad.data = nullptr;
  EXPECT_THROW(plan_cache_out_norms_l1(a, bad, nullptr), std::invalid_argument);
  bad = ok;
  bad.dim = 0;
  EXPECT_THROW(plan_cache_out_norms_l1(a, bad, nullptr), std::invalid_argument);
  v.head_dim = kProjectedValueMaxHeadDim + 2;
  CacheRowsArgs wide = plan_cache_rows(v, nullptr, nullptr);
  EXPECT_THROW(plan_cache_out_norms_l1(wide, ok, nullptr), std::invalid_argument);
}

// One side only: the other is neither written nor described.
TEST(CacheRowsSignal, OneSideOnly) {
  const DeviceKvGeometry g{1, 2, 8, KvType::F16};
  DeviceKvTwin twin(g);
  std::vector<float> k(3 * 2 * 8), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i), v[i] = -static_cast<float>(i);
  twin.append(0, 3, k.data(), v.data(), 2 * 8, std::vector<int32_t>{0, 0});
  CacheRowsHost host;
  host.values = {1.0f};
  host.key_norms = {1.0f};
  const CacheRowsSignal s = cache_rows_twin(twin.layer_view(0), {.keys = true}, host);
  EXPECT_NE(s.keys, nullptr);
  EXPECT_EQ(s.values, nullptr);
  EXPECT_EQ(s.key_norms, nullptr);
  EXPECT_TRUE(host.values.empty());
  EXPECT_TRUE(host.key_norms.empty());
  ASSERT_EQ(host.keys.size(), 2u * 8 * 3);
  // Head 1, dimension 2, entry 1: token 1's row at column 8 + 2.
  EXPECT_EQ(host.keys[static_cast<size_t>(s.offset[1]) + 2 * 3 + 1], k[1 * 16 + 8 + 2]);
  // The norms alone: no row written, the signal not empty.
  const CacheRowsSignal n = cache_rows_twin(twin.layer_view(0), {.norms = true}, host);
  EXPECT_FALSE(n.empty());
  EXPECT_EQ(n.keys, nullptr);
  EXPECT_TRUE(host.keys.empty());
  ASSERT_EQ(host.key_norms.size(), 6u);
  EXPECT_TRUE(cache_rows_twin(twin.layer_view(0), {}, host).empty());
}

// A view the plan cannot carry by value, or a nonsensical one, is refused.
TEST(CacheRowsSignal, RefusesViewsItCannotPlan) {
  DeviceKvLayerView v;
  v.head_dim = 4;
  v.n_heads = kDeviceKvMaxHeads + 1;
  EXPECT_THROW(plan_cache_rows(v, nullptr, nullptr), std::invalid_argument);
  v.n_heads = 1;
  v.head_dim = 0;
  EXPECT_THROW(plan_cache_rows(v, nullptr, nullptr), std::invalid_argument);
  v.head_dim = 4;
  v.length[0] = -1;
  EXPECT_THROW(plan_cache_rows(v, nullptr, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict
