// The device KV cache (core/decode/cuda/device_kv_cache.h) against its host twin after the same
// operations: every stored word and position equal (GPU only; skipped with the reason when the
// build has no CUDA or no usable device). Passed on an H200 on 2026-12-04 (docs/CUDA.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/cache_rows_signal.h"
#include "core/decode/device_download.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_type_scalar.h"
#include "core/decode/rope.h"
#include "device_kv_test_ops.h"
#include "device_kv_gpu_test_util.h"
#include "row_merge_cases.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/cache_rows.h"
#include "core/decode/cuda/cuda_kernels.h"
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_memory.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

// Whether the host.size() floats at `device` are bit for bit `host` (downloaded first; `what`
// names them in a failed download and in the failure).
::testing::AssertionResult same_bits_on_device(const float* device, const std::vector<float>& host, const char* what) {
  std::vector<float> got;
  download_device_floats(device, host.size(), got, what);
  if (got.size() == host.size() && (host.empty() || std::memcmp(got.data(), host.data(), host.size() * sizeof(float)) == 0))
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << " differ from the twin's";
}

void expect_same(const cuda::DeviceKvCache& device, const DeviceKvTwin& twin, const std::string& where) {
  const DeviceKvGeometry& g = twin.layout().geometry();
  for (int l = 0; l < g.n_layers; ++l) {
    for (int h = 0; h < g.n_heads; ++h) {
      ASSERT_EQ(device.layout().layer(l).heads[size_t(h)].capacity, twin.layout().layer(l).heads[size_t(h)].capacity)
          << where << " (the same layouts: growth and release)";
      ASSERT_EQ(device.layout().length(l, h), twin.layout().length(l, h)) << where;
      const DeviceKvHeadContents d = device.read_head(l, h), t = twin.read_head(l, h);
      ASSERT_EQ(d.positions, t.positions) << where << " layer " << l << " head " << h;
      const int64_t len = twin.layout().length(l, h), first = len / 3;  // a range inside the head
      ASSERT_EQ(device.read_positions(l, h, first, len - first), twin.read_positions(l, h, first, len - first))
          << where << " read_positions, layer " << l << " head " << h;
      ASSERT_EQ(d.keys, t.keys) << where << " keys, layer " << l << " head " << h;
      ASSERT_EQ(d.values, t.values) << where << " values, layer " << l << " head " << h;
    }
  }
}

void apply(cuda::DeviceKvCache& device, DeviceKvTwin& twin, const device_kv_test::Op& op) {
  if (op.append) {
    device.append_from_host(op.layer, op.n, op.keys.data(), op.values.data(), op.stride, op.first_positions);
    twin.append(op.layer, op.n, op.keys.data(), op.values.data(), op.stride, op.first_positions);
  } else {
    device.compact(op.layer, op.keep);
    twin.compact(op.layer, op.keep);
    device.release_room(op.layer);
    twin.release_room(op.layer);
  }
}

#endif

class DeviceKvCacheGpu : public ::testing::TestWithParam<KvType> {};

TEST_P(DeviceKvCacheGpu, MatchesTheHostTwinAfterRandomAppendsAndKeeps) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int head_dim : {6, 64, 128}) {
    const DeviceKvGeometry g{3, 4, head_dim, GetParam()};
    const DeviceKvGrowthPolicy policy{.row_quantum = 4, .growth = 1.25};
    cuda::DeviceKvCache device(g, policy);
    DeviceKvTwin twin(g, policy);
    const auto ops = device_kv_test::random_ops(g, 120, 31u + static_cast<uint32_t>(head_dim));
    for (size_t o = 0; o < ops.size(); ++o) {
      apply(device, twin, ops[o]);
      expect_same(device, twin, "head_dim " + std::to_string(head_dim) + ", after op " + std::to_string(o));
      if (HasFatalFailure()) return;
    }
  }
#endif
}

TEST_P(DeviceKvCacheGpu, WriteRowsMatchesTheHostTwin) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const DeviceKvGeometry g{2, 3, 64, GetParam()};
  const DeviceKvGrowthPolicy policy{.row_quantum = 4, .growth = 1.25};
  cuda::DeviceKvCache device(g, policy);
  DeviceKvTwin twin(g, policy);
  for (const auto& op : device_kv_test::random_ops(g, 20, 5u)) apply(device, twin, op);
  const auto lengths = [&](int l, int h) { return twin.layout().length(l, h); };
  for (uint32_t round = 0; round < 30; ++round) {
    const auto w = device_kv_test::random_writes(g, 1, 100u + round, lengths)[0];
    device.write_rows(w.layer, w.head, w.first, w.rows, w.keys.data(), w.values.data(), w.positions.data());
    twin.write_rows(w.layer, w.head, w.first, w.rows, w.keys.data(), w.values.data(), w.positions.data());
    expect_same(device, twin, "after write " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
#endif
}

TEST_P(DeviceKvCacheGpu, SnapshotRestoreIsExact) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const DeviceKvGeometry g{2, 8, 128, GetParam()};
  cuda::DeviceKvCache device(g);
  DeviceKvTwin twin(g);
  for (const auto& op : device_kv_test::random_ops(g, 12, 7u)) apply(device, twin, op);
  const cuda::DeviceKvSnapshot snap = device.snapshot();
  const DeviceKvTwin::Snapshot twin_snap = twin.snapshot();
  EXPECT_EQ(snap.bytes(), twin.layout().bytes_in_use());
  for (uint32_t round = 0; round < 3; ++round) {
    for (const auto& op : device_kv_test::random_ops(g, 20, 50u + round)) {
      if (op.append) apply(device, twin, op);  // appends stay valid from any lengths
    }
    expect_same(device, twin, "before restore " + std::to_string(round));
    device.restore(snap);
    twin.restore(twin_snap);
    expect_same(device, twin, "after restore " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
#endif
}

// Row norms (row_norms.h) of ranges of every head, the kernel against its twin: the same bits
// (each row summed in element order in double on both sides), after appends and keeps.
TEST_P(DeviceKvCacheGpu, RowNormsMatchTheHostTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int head_dim : {6, 64, 128}) {
    const DeviceKvGeometry g{2, 4, head_dim, GetParam()};
    const DeviceKvGrowthPolicy policy{.row_quantum = 4, .growth = 1.25};
    cuda::DeviceKvCache device(g, policy);
    DeviceKvTwin twin(g, policy);
    for (const auto& op : device_kv_test::random_ops(g, 40, 11u + static_cast<uint32_t>(head_dim))) apply(device, twin, op);
    for (int l = 0; l < g.n_layers; ++l) {
      std::vector<int64_t> first, count;
      for (int h = 0; h < g.n_heads; ++h) {  // the whole head, its tail, or nothing
        const int64_t len = twin.layout().length(l, h);
        first.push_back(h % 2 == 0 ? 0 : len / 2);
        count.push_back(h == 3 ? 0 : len - first.back());
      }
      const std::vector<RowNorms> d = device.row_norms(l, first, count), t = twin.row_norms(l, first, count);
      ASSERT_EQ(d.size(), t.size());
      for (size_t e = 0; e < d.size(); ++e) {
        EXPECT_EQ(d[e].key, t[e].key) << "head_dim " << head_dim << " layer " << l << " row " << e;
        EXPECT_EQ(d[e].value, t[e].value) << "head_dim " << head_dim << " layer " << l << " row " << e;
      }
      const std::vector<int64_t> past(static_cast<size_t>(g.n_heads), twin.layout().length(l, 0)),
          one(static_cast<size_t>(g.n_heads), 1);
      EXPECT_THROW(device.row_norms(l, past, one), std::out_of_range);
    }
  }
#endif
}

// After a compaction that leaves a layer mostly empty, release_room relocates it to smaller arenas
// on the device as in the twin (DeviceKvLayout::layout_to_release): the same capacities and rows, and the device's free
// memory grows by about what the layer gave back.
TEST_P(DeviceKvCacheGpu, ALayerLeftMostlyEmptyGivesItsRoomBackLikeTheTwin) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const DeviceKvGeometry g{2, 2, 64, GetParam()};
  const int rows = 20000;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> keys(size_t(rows) * 2 * 64), values(keys.size());
  for (float& x : keys) x = u(rng);
  for (float& x : values) x = u(rng);
  const std::vector<int32_t> first{0, 0};
  std::vector<std::vector<int>> keep(2);
  for (int j = 0; j < 300; ++j) keep[0].push_back(j * 61);
  for (int j = 299; j >= 0; --j) keep[1].push_back(j * 53 + 7);  // score order: through the gather
  // cudaMemGetInfo sees the whole device, where the device check runs other test processes at the
  // same time: the free-memory check passes if one of three tries sees the room come back.
  bool freed = false;
  for (int attempt = 0; attempt < 3 && !freed; ++attempt) {
    cuda::DeviceKvCache device(g);
    DeviceKvTwin twin(g);
    for (int l = 0; l < 2; ++l) {
      device.append_from_host(l, rows, keys.data(), values.data(), 2 * 64, first);
      twin.append(l, rows, keys.data(), values.data(), 2 * 64, first);
    }
    const size_t reserved_before = device.layout().bytes_reserved();
    size_t free_before = 0, free_after = 0, total = 0;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
    device.compact(0, keep);
    twin.compact(0, keep);
    EXPECT_EQ(device.layout().bytes_reserved(), reserved_before) << "a compaction alone keeps the arenas";
    device.release_room(0);
    twin.release_room(0);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
    EXPECT_LT(twin.layout().layer(0).capacity_rows(), 2 * 1024);  // 1.5 x 300 -> 512 per head
    expect_same(device, twin, "after the release");
    // 2 x 20032 rows given back, less the new arenas; the allocator rounds, so half of it at least.
    const size_t released = size_t(2 * 20032 - twin.layout().layer(0).capacity_rows()) * g.entry_bytes();
    EXPECT_EQ(reserved_before - device.layout().bytes_reserved(), released);
    freed = double(free_after) - double(free_before) > 0.5 * double(released);
  }
  // A note, not a failure: the counter is device-wide, and other test processes (and compute-sanitizer's
  // memcheck, which runs this suite beside another binary) allocate while it is read. The layout's
  // own accounting (bytes_reserved, above) is the test's exact check.
  if (!freed)
    std::printf("[ note ] the device's free memory did not grow by half of what the layer gave back, in 3 tries\n");
#endif
}

// The row merges (row_merges.h, device_kv_merges.h): the kernels against the twin after random
// appends and keeps (ragged heads, relocated regions), with ties planted (equal keys) and more kept
// entries than a block has threads: the same matches (cosines as bits), the same value norms and,
// after the same folds, the same stored words.
TEST_P(DeviceKvCacheGpu, RowMergesMatchTheHostTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int head_dim : {6, 64, 128}) {
    const DeviceKvGeometry g{2, 3, head_dim, GetParam()};
    const DeviceKvGrowthPolicy policy{.row_quantum = 4, .growth = 1.25};
    cuda::DeviceKvCache device(g, policy);
    DeviceKvTwin twin(g, policy);
    std::mt19937 rng(41u + static_cast<uint32_t>(head_dim));
    // Finite rows only: random_ops draws values past F16's range now and then, which F16 stores as
    // inf, and a fold of infs of both signs makes a NaN whose bits the host and the device need not
    // share (CUDA's float results carry one canonical NaN). Within [-2, 2] three rounds of folds stay
    // far below 65504.
    for (auto op : device_kv_test::random_ops(g, 30, 7u + static_cast<uint32_t>(head_dim))) {
      for (float& x : op.keys) x = std::clamp(x, -2.0f, 2.0f);
      for (float& x : op.values) x = std::clamp(x, -2.0f, 2.0f);
      apply(device, twin, op);
    }
    const int extra = 700;  // rows with ties, past one block's 256 threads
    const std::vector<float> keys = test::random_rows_with_ties(extra, g.n_heads * head_dim, rng);
    const std::vector<float> values = test::random_rows_with_ties(extra, g.n_heads * head_dim, rng);
    const std::vector<int32_t> first(static_cast<size_t>(g.n_heads), 5000);
    for (int l = 0; l < g.n_layers; ++l) {
      device.append_from_host(l, extra, keys.data(), values.data(), g.n_heads * head_dim, first);
      twin.append(l, extra, keys.data(), values.data(), g.n_heads * head_dim, first);
    }
    for (int round = 0; round < 3; ++round)
      for (int l = 0; l < g.n_layers; ++l) {
        std::vector<test::RowMergeCase> cases;
        std::vector<KeptKeySearch> searches;
        for (int h = 0; h < g.n_heads; ++h)
          cases.push_back(test::random_row_merge_case(static_cast<int>(twin.layout().length(l, h)), rng));
        for (int h = 0; h < g.n_heads; ++h)
          searches.push_back({h, cases[size_t(h)].kept, cases[size_t(h)].evicted});
        const auto d = device.nearest_kept_keys(l, searches), t = twin.nearest_kept_keys(l, searches);
        ASSERT_EQ(d.size(), t.size());
        for (size_t i = 0; i < d.size(); ++i) {
          ASSERT_EQ(d[i].size(), t[i].size());
          for (size_t e = 0; e < d[i].size(); ++e) {
            ASSERT_EQ(d[i][e].kept, t[i][e].kept) << "head_dim " << head_dim << " head " << i << " evicted " << e;
            ASSERT_EQ(std::memcmp(&d[i][e].cosine, &t[i][e].cosine, sizeof(double)), 0) << d[i][e].cosine;
          }
        }
        for (int h = 0; h < g.n_heads; ++h) {
          const test::RowMergeCase& m = cases[size_t(h)];
          const std::vector<double> dn = device.value_norms(l, h, m.evicted), tn = twin.value_norms(l, h, m.evicted);
          ASSERT_EQ(dn.size(), tn.size());
          for (size_t e = 0; e < dn.size(); ++e) ASSERT_EQ(std::memcmp(&dn[e], &tn[e], sizeof(double)), 0) << dn[e];
          device.fold_rows(l, h, m.folds);
          twin.fold_rows(l, h, m.folds);
        }
      }
    expect_same(device, twin, "head_dim " + std::to_string(head_dim) + " after the folds");
  }
#endif
}

// The cached rows and norms handed to device scoring (cache_rows_signal.h; cuda::CacheRowsBuffer),
// the kernels against their twin: the same bits, every head [d][T] and packed, after appends and
// keeps (ragged heads), everything together and the keys or the norms alone.
TEST_P(DeviceKvCacheGpu, CacheRowsMatchTheHostTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int head_dim : {6, 64, 128}) {
    const DeviceKvGeometry g{2, 4, head_dim, GetParam()};
    const DeviceKvGrowthPolicy policy{.row_quantum = 4, .growth = 1.25};
    cuda::DeviceKvCache device(g, policy);
    DeviceKvTwin twin(g, policy);
    cuda::CacheRowsBuffer buffer;
    for (const auto& op : device_kv_test::random_ops(g, 40, 31u + static_cast<uint32_t>(head_dim))) {
      apply(device, twin, op);
      const int l = op.layer;
      const DeviceKvLayerView view = make_layer_view(device.layout().layer(l), g, device.keys(l), device.values(l),
                                                     device.positions(l));
      CacheRowsHost twin_rows;
      const CacheRowsSignal t = cache_rows_twin(twin.layer_view(l), {true, true, true}, twin_rows);
      // Keys, values and norms after appends; the keys alone, then the norms alone, after keeps.
      const bool both = op.append;
      const CacheRowsSignal d = buffer.fill(view, {.keys = true, .values = both, .norms = both});
      ASSERT_TRUE(d.on_device);
      ASSERT_EQ(d.length, t.length);
      ASSERT_EQ(d.offset, t.offset);
      if (twin_rows.keys.empty()) continue;
      EXPECT_TRUE(same_bits_on_device(d.keys, twin_rows.keys, "test keys")) << "layer " << l;
      if (!both) {
        EXPECT_EQ(d.values, nullptr);
        EXPECT_EQ(d.key_norms, nullptr);
        const CacheRowsSignal n = buffer.fill(view, {.norms = true});
        ASSERT_NE(n.key_norms, nullptr);
        EXPECT_TRUE(same_bits_on_device(n.key_norms, twin_rows.key_norms, "test key norms")) << "layer " << l;
        continue;
      }
      EXPECT_TRUE(same_bits_on_device(d.values, twin_rows.values, "test values")) << "layer " << l;
      EXPECT_TRUE(same_bits_on_device(d.key_norms, twin_rows.key_norms, "test key norms")) << "layer " << l;
      EXPECT_TRUE(same_bits_on_device(d.value_norms, twin_rows.value_norms, "test value norms")) << "layer " << l;
    }
  }
#endif
}

// K_pre (each key rotated back by its entry's position, cache_rows_signal.h): the kernel against
// the twin's element body with the same table, bit for bit (explicit fmaf on both sides), after
// appends and keeps that leave the heads ragged (positions below 4096 here, so the table is small).
TEST_P(DeviceKvCacheGpu, CacheRowsKeysBeforeRopeMatchTheTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit})
    for (int head_dim : {64, 128}) {
      const DeviceKvGeometry g{1, 4, head_dim, GetParam()};
      cuda::DeviceKvCache device(g);
      DeviceKvTwin twin(g);
      cuda::CacheRowsBuffer buffer;
      ModelConfig config;
      config.head_dim = head_dim;
      config.rope_style = style;
      Rope rope(config);
      rope.reserve(4096);
      const RopeTableView on_device = device.device_rope(rope.table());
      std::mt19937 rng(9u + static_cast<uint32_t>(head_dim));
      std::normal_distribution<float> normal(0.0f, 2.0f);
      for (int round = 0; round < 3; ++round) {
        apply(device, twin,
              device_kv_test::normal_append(g, 0, 100 + 37 * round, {100 * round, 1000 + round, 3000, 7 * round}, rng, normal));
        apply(device, twin, device_kv_test::random_keep_op(rng, twin.layout(), 0));
        const DeviceKvLayerView view = make_layer_view(device.layout().layer(0), g, device.keys(0), device.values(0),
                                                       device.positions(0));
        CacheRowsHost twin_rows;
        const CacheRowsSignal t = cache_rows_twin(twin.layer_view(0), {.keys_pre_rope = true}, twin_rows, rope.table());
        const CacheRowsSignal d = buffer.fill(view, {.keys_pre_rope = true}, on_device);
        ASSERT_NE(d.keys_pre_rope, nullptr);
        ASSERT_EQ(d.length, t.length);
        ASSERT_EQ(d.offset, t.offset);
        if (twin_rows.keys_pre_rope.empty()) continue;
        EXPECT_TRUE(same_bits_on_device(d.keys_pre_rope, twin_rows.keys_pre_rope, "test keys before RoPE"))
            << "round " << round << " head_dim " << head_dim;
      }
    }
#endif
}

// The projected value norms (out_norm_l1, projected_value_norms.h): the tiled kernel against the
// twin's element body over the same F16 W_o (the decoder's layout, [dim][n_heads * head_dim]), bit
// for bit (products and sums rounded separately on both sides), after appends and keeps that leave
// the heads ragged and longer than one block of 128; dim 100 leaves a partial pass of W_o's rows.
TEST_P(DeviceKvCacheGpu, CacheRowsProjectedValueNormsMatchTheTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (int head_dim : {16, 128}) {
    const int group = 3, dim = 100;
    const DeviceKvGeometry g{1, 2, head_dim, GetParam()};
    const int q_dim = g.n_heads * group * head_dim;
    cuda::DeviceKvCache device(g);
    DeviceKvTwin twin(g);
    cuda::CacheRowsBuffer buffer;
    std::mt19937 rng(13u + static_cast<uint32_t>(head_dim));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> wo(static_cast<size_t>(dim) * q_dim);
    for (uint16_t& w : wo) w = kv_scalar::f32_to_f16(0.1f * normal(rng));
    cuda::DeviceArray<uint16_t> wo_device;
    wo_device.upload(wo);
    const OutputProjectionView on_host{wo.data(), KvType::F16, dim, group, q_dim, head_dim};
    OutputProjectionView on_device = on_host;
    on_device.data = wo_device.data();
    for (int round = 0; round < 3; ++round) {
      apply(device, twin, device_kv_test::normal_append(g, 0, 150 + 61 * round, {200 * round, 5 * round}, rng, normal));
      apply(device, twin, device_kv_test::random_keep_op(rng, twin.layout(), 0));
      const DeviceKvLayerView view = make_layer_view(device.layout().layer(0), g, device.keys(0), device.values(0),
                                                     device.positions(0));
      CacheRowsHost twin_rows;
      const CacheRowsSignal t = cache_rows_twin(twin.layer_view(0), {.out_norms_l1 = true}, twin_rows, {}, on_host);
      const CacheRowsSignal d = buffer.fill(view, {.out_norms_l1 = true}, {}, on_device);
      ASSERT_NE(d.out_norms_l1, nullptr);
      ASSERT_EQ(d.group, group);
      ASSERT_EQ(d.length, t.length);
      ASSERT_EQ(d.offset, t.offset);
      EXPECT_EQ(d.keys, nullptr);
      if (twin_rows.out_norms_l1.empty()) continue;
      EXPECT_TRUE(same_bits_on_device(d.out_norms_l1, twin_rows.out_norms_l1, "test projected value norms"))
          << "round " << round << " head_dim " << head_dim;
    }
  }
#endif
}

// Position re-assignment (device_kv_reassign.h) on the device against the twin: the same words and
// positions (rope_rerotate_pair's explicit fused multiply-adds give the same bits on both), after
// appends at scattered positions and shuffled keeps, for both pairing conventions.
TEST_P(DeviceKvCacheGpu, ReassignedPositionsMatchTheHostTwin) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    const DeviceKvGeometry g{2, 4, 64, GetParam()};
    ModelConfig config;
    config.head_dim = g.head_dim;
    config.rope_style = style;
    Rope rope(config);
    rope.reserve(4096);
    cuda::DeviceKvCache device(g);
    DeviceKvTwin twin(g);
    std::mt19937 rng(61);
    std::uniform_real_distribution<float> x(-2.0f, 2.0f);
    for (int l = 0; l < g.n_layers; ++l) {
      const int n = 300, stride = g.n_heads * g.head_dim;
      std::vector<float> k(static_cast<size_t>(n) * stride), v(k.size());
      for (float& e : k) e = x(rng);
      for (float& e : v) e = x(rng);
      std::vector<int32_t> first;
      for (int h = 0; h < g.n_heads; ++h) first.push_back(100 * h + 7);  // positions up to 700
      device.append_from_host(l, n, k.data(), v.data(), stride, first);
      twin.append(l, n, k.data(), v.data(), stride, first);
      std::vector<std::vector<int>> keep(static_cast<size_t>(g.n_heads));
      for (int h = 0; h < g.n_heads; ++h) {
        for (int t = 0; t < n; ++t)
          if (rng() % 3 != 0) keep[static_cast<size_t>(h)].push_back(t);
        std::shuffle(keep[static_cast<size_t>(h)].begin(), keep[static_cast<size_t>(h)].end(), rng);
      }
      device.compact(l, keep);
      twin.compact(l, keep);
      const std::vector<char> heads = {1, 0, 1, 1};
      device.reassign_positions(l, heads, rope.table());
      twin.reassign_positions(l, heads, rope.table());
    }
    expect_same(device, twin, style == RopeStyle::HalfSplit ? "half-split" : "adjacent pairs");
    if (HasFatalFailure()) return;
  }
#endif
}

// The in-place compaction's worst cases on real threads: every source is a later destination
// (shift by one), with one row per chunk (head_dim 1024 f32) and 256 rows per chunk (head_dim 8).
// A missing barrier or an out-of-order chunk would show up as a row read after it was overwritten.
TEST(DeviceKvCacheGpuCompaction, ShiftsInPlaceLikeTheTwin) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  // F32 rows are 2 words per element: head_dim 4 fills every thread of a chunk (256 rows), 1024 one
  // row per chunk; 1000 rows keep both lists in place, 2000 rows make the shift by one longer than
  // kDeviceKvMaxInPlaceMoves (gathered out of place from its first displaced entry).
  for (const auto& [head_dim, rows] : {std::pair{4, 1000}, std::pair{1024, 1000}, std::pair{8, 2000}}) {
    const DeviceKvGeometry g{1, 2, head_dim, KvType::F32};
    std::vector<float> block(static_cast<size_t>(rows) * g.n_heads * head_dim);
    for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(i);
    cuda::DeviceKvCache device(g);
    DeviceKvTwin twin(g);
    const std::vector<int32_t> first{0, 0};
    device.append_from_host(0, rows, block.data(), block.data(), int64_t(g.n_heads) * head_dim, first);
    twin.append(0, rows, block.data(), block.data(), int64_t(g.n_heads) * head_dim, first);
    std::vector<std::vector<int>> keep(2);
    for (int t = 1; t < rows; ++t) keep[0].push_back(t);      // shift by one
    for (int t = 0; t < rows; t += 3) keep[1].push_back(t);   // every third row
    device.compact(0, keep);
    twin.compact(0, keep);
    expect_same(device, twin, "head_dim " + std::to_string(head_dim) + ", rows " + std::to_string(rows));
    if (HasFatalFailure()) return;
  }
#endif
}

// cuda::gather_rows (out-of-place compaction by index list, kept for score-ordered keep lists)
// against the obvious CPU loop.
TEST(CudaGatherRows, MatchesTheCpuGather) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const int rows = 300, width = 72;
  std::vector<float> src(static_cast<size_t>(rows) * width);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const std::vector<int> indices{299, 0, 5, 5, 150, 1, 298, 42};  // any order, repeats allowed
  std::vector<float> expected;
  for (int r : indices) expected.insert(expected.end(), src.begin() + size_t(r) * width, src.begin() + size_t(r + 1) * width);
  cuda::DeviceArray<float> d_src, d_dst(expected.size());
  cuda::DeviceArray<int> d_idx;
  d_src.upload(src);
  d_idx.upload(indices);
  cuda::gather_rows(d_src.data(), d_idx.data(), static_cast<int>(indices.size()), width, d_dst.data());
  std::vector<float> got(expected.size());
  d_dst.download(got.data(), got.size());
  EXPECT_EQ(got, expected);
#endif
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceKvCacheGpu, ::testing::Values(KvType::F16, KvType::BF16, KvType::F32),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

}  // namespace
}  // namespace kvevict
