// The device KV cache's bookkeeping (device_kv_layout.h) and the in-place compaction's ordering
// (device_kv_elements.h run by the host twin): host-only, no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "core/decode/device_kv_layout.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/device_kv_view.h"

namespace kvevict {
namespace {

DeviceKvLayerLayout layer_of(std::vector<int64_t> caps, std::vector<int64_t> lens) { return packed_layout(caps, lens); }

TEST(DeviceKvLayout, ElementSizesMatchTheHostCache) {
  for (KvType t : {KvType::F32, KvType::F16, KvType::BF16}) {
    EXPECT_EQ(device_kv_element_bytes(t), kv_type_size(t)) << kv_type_name(t);
    EXPECT_EQ(kDeviceKvElementBytes[static_cast<int>(t)], kv_type_size(t)) << kv_type_name(t);
  }
  const DeviceKvGeometry g{2, 8, 64, KvType::F16};
  EXPECT_EQ(g.row_bytes(), 128u);
  EXPECT_EQ(g.row_words(), 64);
  EXPECT_EQ(g.entry_bytes(), 2 * 128u + 4u);
  EXPECT_EQ((DeviceKvGeometry{1, 1, 64, KvType::F32}.row_words()), 128);
}

TEST(DeviceKvLayout, GeometryAndPolicyAreValidated) {
  EXPECT_THROW(DeviceKvLayout(DeviceKvGeometry{0, 1, 8, KvType::F16}), std::invalid_argument);
  EXPECT_THROW(DeviceKvLayout(DeviceKvGeometry{1, kDeviceKvMaxHeads + 1, 8, KvType::F16}), std::invalid_argument);
  EXPECT_THROW(DeviceKvLayout(DeviceKvGeometry{1, 1, kDeviceKvMaxRowWords / 2 + 1, KvType::F32}), std::invalid_argument);
  EXPECT_NO_THROW(DeviceKvLayout(DeviceKvGeometry{1, 1, kDeviceKvMaxRowWords / 2, KvType::F32}));
  EXPECT_THROW(DeviceKvLayout(DeviceKvGeometry{1, 1, 8, KvType::F16}, DeviceKvGrowthPolicy{.row_quantum = 0}),
               std::invalid_argument);
  EXPECT_THROW(DeviceKvLayout(DeviceKvGeometry{1, 1, 8, KvType::F16}, DeviceKvGrowthPolicy{.growth = 0.5}),
               std::invalid_argument);
}

TEST(DeviceKvLayout, CapacitiesRoundAndGrowGeometrically) {
  const DeviceKvGrowthPolicy p;  // quantum 64, growth 1.5
  EXPECT_EQ(rounded_capacity(0, p), 0);
  EXPECT_EQ(rounded_capacity(1, p), 64);
  EXPECT_EQ(rounded_capacity(64, p), 64);
  EXPECT_EQ(rounded_capacity(65, p), 128);
  const DeviceKvGeometry g{1, 3, 16, KvType::F16};
  // Head 0 fits, head 1 needs one more row than it has (64 -> ceil(96) -> 128), head 2 jumps far.
  const DeviceKvLayerLayout cur = layer_of({64, 64, 0}, {10, 64, 0});
  const std::vector<int64_t> need{20, 65, 1000};
  const auto grown = reserved_layout(cur, need, g, p);
  ASSERT_TRUE(grown.has_value());
  EXPECT_EQ(grown->heads[0].capacity, 64);
  EXPECT_EQ(grown->heads[1].capacity, 128);
  EXPECT_EQ(grown->heads[2].capacity, 1024);
  EXPECT_EQ(grown->heads[1].base_row, 64);
  EXPECT_EQ(grown->heads[2].base_row, 192);
  EXPECT_EQ(grown->heads[1].length, 64);  // lengths are kept
  const std::vector<int64_t> fits{64, 64, 0};
  EXPECT_FALSE(reserved_layout(cur, fits, g, p).has_value());
}

TEST(DeviceKvLayout, AbsurdSizesAreRefused) {
  const DeviceKvGeometry g{1, 2, 128, KvType::F16};
  DeviceKvGrowthPolicy p;
  p.max_rows_per_head = 1000;
  EXPECT_THROW(rounded_capacity(1001, p), std::length_error);
  EXPECT_EQ(rounded_capacity(999, p), 1000);  // rounding stops at the limit
  const DeviceKvLayerLayout cur = layer_of({0, 0}, {0, 0});
  const std::vector<int64_t> too_many{1001, 0};
  EXPECT_THROW(reserved_layout(cur, too_many, g, p), std::length_error);
  // A geometric step past the limit is clipped instead of refused.
  const DeviceKvLayerLayout near = layer_of({960, 0}, {960, 0});
  const std::vector<int64_t> one_more{961, 0};
  EXPECT_EQ(reserved_layout(near, one_more, g, p)->heads[0].capacity, 1000);
  p.max_arena_bytes = 256 * 127;  // 127 rows of 256 bytes per arena; two heads of 64 rows need 128
  p.max_rows_per_head = 1 << 20;
  const std::vector<int64_t> both{64, 64};
  EXPECT_THROW(reserved_layout(cur, both, g, p), std::length_error);
  const std::vector<int64_t> just_fits{64, 63};
  EXPECT_NO_THROW(reserved_layout(cur, just_fits, g, DeviceKvGrowthPolicy{.row_quantum = 1, .max_arena_bytes = 256 * 127}));
  DeviceKvLayout layout(g, p);
  EXPECT_THROW(layout.layout_for_append(0, 100), std::length_error);
}

TEST(DeviceKvLayout, AppendLandsAfterEachHeadsLiveRows) {
  const DeviceKvLayerLayout l = layer_of({8, 16}, {3, 16});
  DeviceKvAppendArgs args;
  const std::vector<int32_t> first{100, 200};
  EXPECT_THROW(plan_append(l, 1, first, args), std::logic_error);  // head 1 is full
  const DeviceKvLayerLayout roomy = layer_of({8, 20}, {3, 16});
  plan_append(roomy, 4, first, args);
  EXPECT_EQ(args.n, 4);
  EXPECT_EQ(args.n_heads, 2);
  EXPECT_EQ(args.heads[0].dst_row, 3);
  EXPECT_EQ(args.heads[1].dst_row, 8 + 16);
  EXPECT_EQ(args.heads[1].first_position, 200);
  EXPECT_THROW(plan_append(roomy, 0, first, args), std::invalid_argument);
  EXPECT_THROW(plan_append(roomy, 1, std::vector<int32_t>{1}, args), std::invalid_argument);
}

TEST(DeviceKvLayout, CompactionPlansListOnlyDisplacedEntries) {
  const DeviceKvLayerLayout l = layer_of({8, 8, 8, 8}, {6, 6, 6, 6});
  const DeviceKvCompactionPlan plan = plan_compaction(l, {{0, 1, 2}, {0, 1, 4, 5}, {}, {2, 3}});
  EXPECT_EQ(plan.new_lengths, (std::vector<int64_t>{3, 4, 0, 2}));
  ASSERT_EQ(plan.heads.size(), 2u);  // head 0 keeps a prefix, head 2 keeps nothing: no moves
  EXPECT_EQ(plan.listed, (std::vector<int>{1, 3}));
  EXPECT_EQ(plan.heads[0].base_row, 8);
  EXPECT_EQ(plan.heads[0].first, 2);
  EXPECT_EQ(plan.heads[0].moves, 2);
  EXPECT_EQ(plan.heads[0].list_offset, 0);
  EXPECT_EQ(plan.heads[1].base_row, 24);
  EXPECT_EQ(plan.heads[1].first, 0);
  EXPECT_EQ(plan.heads[1].moves, 2);
  EXPECT_EQ(plan.heads[1].list_offset, 2);
  EXPECT_EQ(plan.src_rows, (std::vector<int32_t>{4, 5, 2, 3}));
}

TEST(DeviceKvLayout, OtherOrdersAreGatheredThroughScratch) {
  const DeviceKvLayerLayout l = layer_of({8, 8, 8}, {6, 6, 6});
  const DeviceKvCompactionPlan plan = plan_compaction(l, {{5, 0, 3}, {1, 2}, {2, 1, 0}});
  EXPECT_EQ(plan.new_lengths, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(plan.listed, (std::vector<int>{1}));  // only head 1 is ascending
  EXPECT_EQ(plan.gather_src, (std::vector<int64_t>{5, 0, 3, 18, 17, 16}));
  ASSERT_EQ(plan.gather_back.size(), 2u);
  EXPECT_EQ(plan.gather_back[0].src_row, 0);
  EXPECT_EQ(plan.gather_back[0].dst_row, 0);
  EXPECT_EQ(plan.gather_back[0].rows, 3);
  EXPECT_EQ(plan.gather_back[1].src_row, 3);
  EXPECT_EQ(plan.gather_back[1].dst_row, 16);
  EXPECT_EQ(plan.gather_back[1].rows, 3);
}

TEST(DeviceKvLayout, LongShiftsAreGatheredFromTheirFirstDisplacedEntry) {
  const DeviceKvLayerLayout l = layer_of({8, 8, 8, 8}, {6, 6, 6, 6});
  // at most 2 moves in place: head 0 has 3 (gathered), head 1 has 2 (in place), head 2 none, head 3
  // is in another order with a kept prefix (gathered from its first displaced entry too)
  const DeviceKvCompactionPlan plan = plan_compaction(l, {{0, 1, 3, 4, 5}, {0, 1, 2, 4, 5}, {0, 1}, {0, 4, 2}}, 2);
  EXPECT_EQ(plan.new_lengths, (std::vector<int64_t>{5, 5, 2, 3}));
  EXPECT_EQ(plan.listed, (std::vector<int>{1}));
  EXPECT_EQ(plan.src_rows, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(plan.gather_src, (std::vector<int64_t>{3, 4, 5, 24 + 4, 24 + 2}));
  ASSERT_EQ(plan.gather_back.size(), 2u);
  EXPECT_EQ(plan.gather_back[0].src_row, 0);
  EXPECT_EQ(plan.gather_back[0].dst_row, 2);
  EXPECT_EQ(plan.gather_back[0].rows, 3);
  EXPECT_EQ(plan.gather_back[1].src_row, 3);
  EXPECT_EQ(plan.gather_back[1].dst_row, 24 + 1);
  EXPECT_EQ(plan.gather_back[1].rows, 2);
  // the default cap keeps short shifts in place
  EXPECT_EQ(plan_compaction(l, {{0, 1, 3, 4, 5}, {}, {}, {}}).listed, (std::vector<int>{0}));
}

TEST(DeviceKvLayout, BadKeepListsAreRefused) {
  const DeviceKvLayerLayout l = layer_of({8, 8}, {5, 5});
  EXPECT_THROW(plan_compaction(l, {{0, 1}}), std::invalid_argument);             // one list for two heads
  EXPECT_THROW(plan_compaction(l, {{0, 5}, {}}), std::invalid_argument);         // beyond the length
  EXPECT_THROW(plan_compaction(l, {{-1}, {}}), std::invalid_argument);           // negative
  EXPECT_THROW(plan_compaction(l, {{1, 1}, {}}), std::invalid_argument);         // duplicate
  try {
    plan_compaction(l, {{}, {0, 3, 2, 3}});
    FAIL() << "a repeated entry was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
  DeviceKvTwin twin(DeviceKvGeometry{1, 2, 4, KvType::F16});
  std::vector<float> block(3 * 2 * 4, 1.0f);
  twin.append(0, 3, block.data(), block.data(), 8, std::vector<int32_t>{0, 0});
  EXPECT_THROW(twin.compact(0, {{1}, {2, 2}}), std::invalid_argument);
  EXPECT_EQ(twin.layout().length(0, 0), 3);  // refused before anything moved, in any head
  EXPECT_EQ(twin.layout().length(0, 1), 3);
  EXPECT_THROW(twin.append(0, 1, block.data(), block.data(), 7, std::vector<int32_t>{0, 0}), std::invalid_argument);
  EXPECT_THROW(twin.append(0, 0, block.data(), block.data(), 8, std::vector<int32_t>{0, 0}), std::invalid_argument);
}

TEST(DeviceKvLayout, CopiesMergeAdjacentFullHeads) {
  const DeviceKvLayerLayout from = layer_of({4, 4, 8}, {4, 4, 2});
  const DeviceKvLayerLayout packed = layer_of({4, 4, 2}, {0, 0, 0});
  const std::vector<DeviceKvCopy> c = plan_copy(from, packed);
  ASSERT_EQ(c.size(), 1u);  // heads 0, 1 full and adjacent, head 2 starts where head 1 ends in both
  EXPECT_EQ(c[0].rows, 10);
  const DeviceKvLayerLayout spread = layer_of({8, 8, 8}, {0, 0, 0});
  const std::vector<DeviceKvCopy> s = plan_copy(from, spread);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].src_row, 4);
  EXPECT_EQ(s[1].dst_row, 8);
  EXPECT_EQ(s[2].rows, 2);
  EXPECT_THROW(plan_copy(from, layer_of({4, 3, 8}, {0, 0, 0})), std::logic_error);
}

TEST(DeviceKvLayout, BytesCountLiveAndReservedEntries) {
  const DeviceKvGeometry g{2, 2, 8, KvType::BF16};
  DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 16});
  std::vector<float> block(5 * 2 * 8, 0.25f);
  twin.append(1, 5, block.data(), block.data(), 16, std::vector<int32_t>{0, 0});
  EXPECT_EQ(twin.layout().bytes_in_use(), 2 * 5 * g.entry_bytes());
  EXPECT_EQ(twin.layout().bytes_reserved(), 2 * 16 * g.entry_bytes());
  EXPECT_EQ(twin.layout().packed().bytes_reserved(), twin.layout().bytes_in_use());
}

// A compaction that leaves a layer mostly empty lets release_room give its room back
// (layout_to_release): new arenas of growth x the live rows per head, the rows intact; after one
// that leaves it mostly full, or a small eviction after a release (decode-time), it relocates
// nothing; after a clear it gives every row back. A compaction alone never relocates.
TEST(DeviceKvLayout, ACompactionThatLeavesALayerMostlyEmptyGivesItsRoomBack) {
  const DeviceKvGeometry g{1, 2, 4, KvType::F32};
  DeviceKvTwin twin(g, DeviceKvGrowthPolicy{.row_quantum = 16, .growth = 1.5});
  const int rows = 1000;
  std::vector<float> block(static_cast<size_t>(rows) * 2 * 4);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(i);  // exact in F32: rows are checked
  twin.append(0, rows, block.data(), block.data(), 2 * 4, std::vector<int32_t>{0, 5000});
  const auto capacity = [&](int h) { return twin.layout().layer(0).heads[static_cast<size_t>(h)].capacity; };
  ASSERT_EQ(capacity(0), 1008);
  EXPECT_FALSE(twin.layout().layout_to_release(0).has_value());
  const auto keep_every = [&](int step, int count) {
    std::vector<std::vector<int>> keep(2);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < count; ++j) keep[static_cast<size_t>(h)].push_back(j * step + h);
    return keep;
  };
  twin.compact(0, keep_every(1, 600));  // 600 of 1000: 1.5 x 600 -> 912 per head, 2016 <= 2 x 1824
  twin.release_room(0);
  EXPECT_EQ(capacity(0), 1008);
  std::vector<std::vector<int>> keep = keep_every(15, 40);  // 40 rows per head, one in score order
  std::swap(keep[1][0], keep[1][39]);
  const std::vector<DeviceKvHeadContents> before{twin.read_head(0, 0), twin.read_head(0, 1)};
  twin.compact(0, keep);
  EXPECT_EQ(capacity(0), 1008);  // the compaction alone keeps the arenas
  twin.release_room(0);
  EXPECT_EQ(capacity(0), 64);  // 1.5 x 40 -> 60 -> 64
  EXPECT_EQ(capacity(1), 64);
  EXPECT_EQ(twin.layout().bytes_reserved(), 2 * 64 * g.entry_bytes());
  for (int h = 0; h < 2; ++h) {
    const DeviceKvHeadContents now = twin.read_head(0, h);
    ASSERT_EQ(now.positions.size(), 40u);
    const size_t rw = static_cast<size_t>(g.row_words());
    for (size_t j = 0; j < 40; ++j) {
      const size_t from = static_cast<size_t>(keep[static_cast<size_t>(h)][j]);
      EXPECT_EQ(now.positions[j], before[static_cast<size_t>(h)].positions[from]) << "head " << h << " row " << j;
      EXPECT_TRUE(std::equal(now.keys.begin() + j * rw, now.keys.begin() + (j + 1) * rw,
                             before[static_cast<size_t>(h)].keys.begin() + from * rw))
          << "head " << h << " row " << j;
    }
  }
  twin.append(0, 30, block.data(), block.data(), 2 * 4, std::vector<int32_t>{9000, 9000});  // 70 > 64: grows to 96
  EXPECT_EQ(capacity(0), 96);
  twin.compact(0, keep_every(1, 60));  // a decode-time eviction: 1.5 x 60 = 90 -> 96, 192 <= 2 x 192
  twin.release_room(0);
  EXPECT_EQ(capacity(0), 96);
  EXPECT_FALSE(twin.layout().layout_to_release(0).has_value());
  twin.compact(0, {{}, {}});  // a clear
  twin.release_room(0);
  EXPECT_EQ(twin.layout().bytes_reserved(), 0u);
  EXPECT_EQ(twin.layout().length(0, 1), 0);
}

// ---- In-place compaction reads each source before any chunk overwrites it. Rows carry their own
// index (F32, exact), so a row read after it was overwritten shows up as a wrong index.
struct Numbered {
  DeviceKvGeometry g;
  DeviceKvTwin twin;
  Numbered(int head_dim, int rows) : g{1, 1, head_dim, KvType::F32}, twin(g) {
    std::vector<float> block(static_cast<size_t>(rows) * head_dim);
    for (int r = 0; r < rows; ++r) {
      for (int d = 0; d < head_dim; ++d) block[static_cast<size_t>(r) * head_dim + d] = float(r * 10000 + d);
    }
    twin.append(0, rows, block.data(), block.data(), head_dim, std::vector<int32_t>{0});
  }
  void expect_rows(const std::vector<int>& keep) {
    const DeviceKvHeadContents c = twin.read_head(0, 0);
    const std::vector<float> k = device_kv_words_to_f32(KvType::F32, c.keys);
    ASSERT_EQ(c.positions, std::vector<int32_t>(keep.begin(), keep.end()));
    for (size_t j = 0; j < keep.size(); ++j) {
      for (int d = 0; d < g.head_dim; ++d) ASSERT_EQ(k[j * g.head_dim + d], float(keep[j] * 10000 + d)) << "row " << j;
    }
  }
};

TEST(DeviceKvCompaction, InPlaceNeverReadsAnOverwrittenRow) {
  // F32 rows are 2 words per element: head_dim 1024 is one row per chunk, 4 is 256 rows per chunk
  // (every thread), 8 is 128 and 100 is 10. 700 rows: every list below stays in place.
  for (int head_dim : {1024, 4, 8, 100}) {
    const int rows = 700;
    std::vector<std::vector<int>> cases;
    cases.push_back(std::vector<int>(rows - 1));
    std::iota(cases.back().begin(), cases.back().end(), 1);  // shift by one: every source is a later destination
    cases.emplace_back();
    for (int t = 0; t < rows; t += 2) cases.back().push_back(t);  // every other row
    cases.emplace_back();
    for (int t = rows / 2; t < rows; ++t) cases.back().push_back(t);  // the back half to the front
    cases.push_back({0, 1, 2, 500, 501, 699});
    for (const auto& keep : cases) {
      Numbered n(head_dim, rows);
      n.twin.compact(0, {keep});
      n.expect_rows(keep);
      if (HasFatalFailure()) return;
    }
  }
}

// A shift longer than kDeviceKvMaxInPlaceMoves goes through the gather (scratch rows, copied back
// from the first displaced entry): the same rows as the in-place moves give.
TEST(DeviceKvCompaction, LongShiftsThroughTheGatherKeepTheRows) {
  const int rows = static_cast<int>(kDeviceKvMaxInPlaceMoves) + 300;
  for (int evicted : {0, 7, rows / 2, rows - 1}) {
    std::vector<int> keep;
    for (int t = 0; t < rows; ++t)
      if (t != evicted) keep.push_back(t);
    Numbered n(8, rows);
    const int64_t moves = static_cast<int64_t>(keep.size()) - evicted;  // every entry after the evicted one
    ASSERT_EQ(!plan_compaction(n.twin.layout().layer(0), {keep}).gather_src.empty(), moves > kDeviceKvMaxInPlaceMoves)
        << "evicted " << evicted;
    n.twin.compact(0, {keep});
    n.expect_rows(keep);
    if (HasFatalFailure()) return;
  }
}

// The barrier matters: the same element code run without it (each thread storing right after its
// own load, threads in reverse order) corrupts the shift-by-one case. This is the failure the
// previous test would catch if the twin or the kernel dropped the load/store split.
TEST(DeviceKvCompaction, WithoutTheBarrierTheShiftCorrupts) {
  Numbered n(8, 64);
  std::vector<int> keep(63);
  std::iota(keep.begin(), keep.end(), 1);
  const DeviceKvCompactionPlan plan = plan_compaction(n.twin.layout().layer(0), {keep});
  DeviceKvTwin::Snapshot s = n.twin.snapshot();  // its arenas are packed: base row 0, same rows
  DeviceKvCompactArgs args;
  args.key_arena = s.layers[0].keys.data();
  args.value_arena = s.layers[0].values.data();
  args.positions = s.layers[0].positions.data();
  args.src_rows = plan.src_rows.data();
  args.row_words = n.g.row_words();
  args.chunk_rows = device_kv_chunk_rows(args.row_words);
  args.n_heads = 1;
  args.heads[0] = plan.heads[0];
  DeviceKvCompactRegs r{};
  for (int t = kDeviceKvCompactThreads - 1; t >= 0; --t) {
    device_kv_compact_load(args, 0, 0, t, r);
    device_kv_compact_store(args, 0, 0, t, r);
  }
  int wrong = 0;
  for (int j = 0; j < 63; ++j) wrong += s.layers[0].positions[j] != keep[j];
  EXPECT_GT(wrong, 0);
  n.twin.compact(0, {keep});  // with the barrier: right
  n.expect_rows(keep);
}

// The view reading kernels take: each head's base row and length from the layout, the arenas and
// geometry as given; more heads than the view can carry by value are refused, not truncated.
TEST(DeviceKvLayerView, CopiesTheLayoutAndRefusesTooManyHeads) {
  const DeviceKvGeometry g{1, 3, 16, KvType::BF16};
  const DeviceKvLayerLayout layout = layer_of({64, 128, 64}, {10, 0, 64});
  int dummy = 0;
  const DeviceKvLayerView v = make_layer_view(layout, g, &dummy, &dummy + 1, nullptr);
  EXPECT_EQ(v.n_heads, 3);
  EXPECT_EQ(v.head_dim, 16);
  EXPECT_EQ(v.type, KvType::BF16);
  EXPECT_EQ(v.keys, &dummy);
  EXPECT_EQ(v.values, &dummy + 1);
  for (int h = 0; h < 3; ++h) {
    EXPECT_EQ(v.base_row[h], layout.heads[h].base_row) << h;
    EXPECT_EQ(v.length[h], layout.heads[h].length) << h;
  }
  const std::vector<int64_t> many(kDeviceKvMaxHeads + 1, 64);
  EXPECT_THROW(make_layer_view(packed_layout(many, many), g, nullptr, nullptr, nullptr), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict
