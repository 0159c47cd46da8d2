// The device KV cache's host twin (the kernels' element code over an emulated grid) against an
// independent reference (device_kv_test_ops.h) and against the host KVCache, bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_cache.h"
#include "device_kv_test_ops.h"

namespace kvevict {
namespace {

using device_kv_test::Op;
using device_kv_test::random_ops;
using device_kv_test::ReferenceCache;

using device_kv_test::apply;

void expect_equal(const DeviceKvTwin& twin, const ReferenceCache& ref, const std::string& where) {
  const DeviceKvGeometry& g = twin.layout().geometry();
  for (int l = 0; l < g.n_layers; ++l) {
    for (int h = 0; h < g.n_heads; ++h) {
      const DeviceKvHeadContents c = twin.read_head(l, h);
      ASSERT_EQ(c.positions, ref.head(l, h).positions) << where << " layer " << l << " head " << h;
      ASSERT_EQ(c.keys, ref.key_words(l, h)) << where << " keys, layer " << l << " head " << h;
      ASSERT_EQ(c.values, ref.value_words(l, h)) << where << " values, layer " << l << " head " << h;
    }
  }
}

class DeviceKvTwinTypes : public ::testing::TestWithParam<KvType> {};

TEST_P(DeviceKvTwinTypes, RandomAppendsAndKeepsMatchTheReference) {
  // A small quantum so the sequence relocates layers many times; head_dim 6 and 64 give chunks of
  // hundreds of rows and of a few rows.
  for (int head_dim : {6, 64}) {
    const DeviceKvGeometry g{3, 4, head_dim, GetParam()};
    DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 4, .growth = 1.25});
    ReferenceCache ref(g);
    const std::vector<Op> ops = random_ops(g, 120, 17u + static_cast<uint32_t>(head_dim));
    for (size_t o = 0; o < ops.size(); ++o) {
      apply(twin, ref, ops[o]);
      expect_equal(twin, ref, "after op " + std::to_string(o));
      if (HasFatalFailure()) return;
    }
    EXPECT_EQ(twin.layout().bytes_in_use(), [&] {
      size_t entries = 0;
      for (const auto& h : ref.heads) entries += h.positions.size();
      return entries * g.entry_bytes();
    }());
  }
}

TEST_P(DeviceKvTwinTypes, SnapshotRestoresExactlyManyTimes) {
  const DeviceKvGeometry g{2, 3, 16, GetParam()};
  DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 8});
  ReferenceCache ref(g);
  const std::vector<Op> prefill = random_ops(g, 10, 5u);
  for (const Op& op : prefill) apply(twin, ref, op);
  const DeviceKvTwin::Snapshot snap = twin.snapshot();
  const ReferenceCache at_snapshot = ref;
  for (uint32_t round = 0; round < 4; ++round) {  // one prefill, several budgets' decodes
    ReferenceCache scratch = at_snapshot;
    std::mt19937 rng(100u + round);
    for (int l = 0; l < g.n_layers; ++l) {  // a few decode steps on every layer
      const int n = 1 + static_cast<int>(round);
      std::vector<float> k(static_cast<size_t>(n) * g.n_heads * g.head_dim), v(k.size());
      for (float& x : k) x = device_kv_test::random_value(rng);
      for (float& x : v) x = device_kv_test::random_value(rng);
      const std::vector<int32_t> first(g.n_heads, 1000 + static_cast<int32_t>(round));
      twin.append(l, n, k.data(), v.data(), g.n_heads * g.head_dim, first);
      scratch.append(l, n, k.data(), v.data(), g.n_heads * g.head_dim, first);
    }
    // Evict half of every head of layer 0, growing layer 1 past its capacity.
    std::vector<std::vector<int>> keep(g.n_heads);
    for (int h = 0; h < g.n_heads; ++h) {
      for (int t = 1; t < twin.layout().length(0, h); t += 2) keep[h].push_back(t);
    }
    twin.compact(0, keep);
    scratch.keep(0, keep);
    std::vector<float> big(static_cast<size_t>(300) * g.n_heads * g.head_dim, 0.5f);
    const std::vector<int32_t> first(g.n_heads, 7);
    twin.append(1, 300, big.data(), big.data(), g.n_heads * g.head_dim, first);
    scratch.append(1, 300, big.data(), big.data(), g.n_heads * g.head_dim, first);
    expect_equal(twin, scratch, "before restore " + std::to_string(round));
    twin.restore(snap);
    expect_equal(twin, at_snapshot, "after restore " + std::to_string(round));
    if (HasFatalFailure()) return;
  }
}

TEST_P(DeviceKvTwinTypes, StoresWhatTheHostKVCacheStores) {
  ModelConfig c;
  c.n_layers = 2;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 8;
  c.vocab_size = 300;
  c.context_length = 4096;
  const DeviceKvGeometry g{c.n_layers, c.n_kv_heads, c.head_dim, GetParam()};
  KVCache host(c, GetParam());
  DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 4});
  for (const Op& op : random_ops(g, 60, 99u)) {
    if (op.append) {
      twin.append(op.layer, op.n, op.keys.data(), op.values.data(), op.stride, op.first_positions);
      for (int i = 0; i < op.n; ++i) {
        for (int h = 0; h < g.n_heads; ++h) {
          const size_t at = static_cast<size_t>(i) * op.stride + static_cast<size_t>(h) * g.head_dim;
          host.append(op.layer, h, op.first_positions[h] + i, op.keys.data() + at, op.values.data() + at);
        }
      }
    } else {
      twin.compact(op.layer, op.keep);
      for (int h = 0; h < g.n_heads; ++h) host.keep(op.layer, h, op.keep[h]);
    }
  }
  for (int l = 0; l < g.n_layers; ++l) {
    for (int h = 0; h < g.n_heads; ++h) {
      const DeviceKvHeadContents d = twin.read_head(l, h);
      const int len = host.length(l, h);
      ASSERT_EQ(d.positions, std::vector<int32_t>(host.positions(l, h), host.positions(l, h) + len));
      const size_t words = d.keys.size();
      ASSERT_EQ(words, static_cast<size_t>(len) * g.row_words());
      const void* hk = GetParam() == KvType::F32 ? static_cast<const void*>(host.stored_keys(l, h).f32())
                                                 : host.stored_keys(l, h).bits16();
      const void* hv = GetParam() == KvType::F32 ? static_cast<const void*>(host.stored_values(l, h).f32())
                                                 : host.stored_values(l, h).bits16();
      EXPECT_TRUE(words == 0 || std::memcmp(d.keys.data(), hk, words * 2) == 0) << "keys, layer " << l << " head " << h;
      EXPECT_TRUE(words == 0 || std::memcmp(d.values.data(), hv, words * 2) == 0) << "values, layer " << l << " head " << h;
    }
  }
}

// write_rows (the mirror's resync): overwrites inside a head, straddles its end or extends it,
// growing the layer when needed; converts as append does (the reference's kv_from_f32).
TEST_P(DeviceKvTwinTypes, WriteRowsOverwritesAndExtendsLikeTheReference) {
  for (int head_dim : {6, 64}) {
    const DeviceKvGeometry g{2, 3, head_dim, GetParam()};
    DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 4, .growth = 1.25});
    ReferenceCache ref(g);
    for (const Op& op : random_ops(g, 20, 5u)) apply(twin, ref, op);
    const auto lengths = [&](int l, int h) { return twin.layout().length(l, h); };
    for (uint32_t round = 0; round < 30; ++round) {
      const auto w = device_kv_test::random_writes(g, 1, 100u + round, lengths)[0];
      twin.write_rows(w.layer, w.head, w.first, w.rows, w.keys.data(), w.values.data(), w.positions.data());
      ref.write(w.layer, w.head, w.first, w.rows, w.keys.data(), w.values.data(), w.positions.data());
      expect_equal(twin, ref, "after write " + std::to_string(round));
      if (HasFatalFailure()) return;
    }
    // A hole after the head's end is refused before anything changes.
    const int64_t len = twin.layout().length(1, 2);
    const std::vector<float> row(static_cast<size_t>(head_dim), 1.0f);
    const int32_t pos = 0;
    EXPECT_THROW(twin.write_rows(1, 2, len + 1, 1, row.data(), row.data(), &pos), std::invalid_argument);
    EXPECT_THROW(twin.write_rows(1, 3, 0, 1, row.data(), row.data(), &pos), std::invalid_argument);
    EXPECT_EQ(twin.layout().length(1, 2), len);
    expect_equal(twin, ref, "after the refused writes");
  }
}

// read_positions: the positions read_rows gives for every range of every head, without the words;
// a range past a head's end is refused.
TEST_P(DeviceKvTwinTypes, ReadPositionsAreReadRowsPositions) {
  const DeviceKvGeometry g{2, 3, 6, GetParam()};
  DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 4, .growth = 1.25});
  ReferenceCache ref(g);
  for (const Op& op : random_ops(g, 40, 9u)) apply(twin, ref, op);
  int64_t ranges = 0;
  for (int l = 0; l < g.n_layers; ++l)
    for (int h = 0; h < g.n_heads; ++h) {
      const int64_t len = twin.layout().length(l, h);
      for (int64_t first = 0; first <= len; first += 3)
        for (int64_t rows = 0; first + rows <= len; rows += 5, ++ranges)
          EXPECT_EQ(twin.read_positions(l, h, first, rows), twin.read_rows(l, h, first, rows).positions)
              << "layer " << l << " head " << h << " rows " << first << "+" << rows;
      EXPECT_THROW(twin.read_positions(l, h, len, 1), std::out_of_range);
      EXPECT_THROW(twin.read_positions(l, h, -1, 1), std::out_of_range);
    }
  EXPECT_GT(ranges, 50) << "the random operations left the heads too short to test ranges";
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceKvTwinTypes, ::testing::Values(KvType::F16, KvType::BF16, KvType::F32),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

}  // namespace
}  // namespace kvevict
