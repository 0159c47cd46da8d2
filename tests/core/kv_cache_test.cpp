// The ragged KV cache: appends, physical compaction with `keep`, exact byte accounting, reuse of
// the freed tail, and pre-RoPE key recovery.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/decode/rope.h"

namespace kvevict {
namespace {

ModelConfig cache_config(RopeStyle style = RopeStyle::AdjacentPairs) {
  ModelConfig c;
  c.n_layers = 2;
  c.dim = 24;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 6;
  c.hidden_dim = 8;
  c.vocab_size = 300;
  c.context_length = 10000;
  c.rope_style = style;
  return c;
}

// Entry t of (layer, head) holds key = value = [code, code + 1, ...] with code = 1000 * layer + 100 * head + t.
void fill(KVCache& cache, int layer, int head, int n, int first_position = 0) {
  std::vector<float> row(cache.head_dim());
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < cache.head_dim(); ++i) row[i] = 1000.0f * layer + 100.0f * head + t + 0.001f * i;
    cache.append(layer, head, first_position + t, row.data(), row.data());
  }
}

float code_of(const KVCache& cache, int layer, int head, int index) {
  return cache.keys(layer, head)[static_cast<size_t>(index) * cache.head_dim()] - 1000.0f * layer - 100.0f * head;
}

TEST(KVCache, HeadsAreRagged) {
  KVCache cache(cache_config(), KvType::F32);
  fill(cache, 0, 0, 5);
  fill(cache, 1, 1, 3);
  EXPECT_EQ(cache.length(0, 0), 5);
  EXPECT_EQ(cache.length(0, 1), 0);
  EXPECT_EQ(cache.length(1, 1), 3);
  EXPECT_EQ(cache.total_entries(), 8);
  EXPECT_EQ(cache.positions(1, 1)[2], 2);
}

TEST(KVCache, KeepCompactsInAscendingOrder) {
  KVCache cache(cache_config(), KvType::F32);
  fill(cache, 1, 0, 10);
  const std::vector<int> keep = {0, 3, 4, 9};
  cache.keep(1, 0, keep);
  ASSERT_EQ(cache.length(1, 0), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cache.positions(1, 0)[i], keep[i]);
    EXPECT_FLOAT_EQ(code_of(cache, 1, 0, i), keep[i]);
    EXPECT_NEAR(cache.values(1, 0)[i * 6 + 5] - 1000.0f, keep[i] + 0.005f, 1e-3);
  }
}

TEST(KVCache, KeepHonoursTheGivenOrder) {
  KVCache cache(cache_config(), KvType::F32);
  fill(cache, 0, 1, 8);
  const std::vector<int> keep = {7, 2, 5, 0};
  cache.keep(0, 1, keep);
  ASSERT_EQ(cache.length(0, 1), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(cache.positions(0, 1)[i], keep[i]);
    EXPECT_FLOAT_EQ(code_of(cache, 0, 1, i), keep[i]);
  }
}

// KVCache::edit_stamp (edit_stamp.h): appends leave a head's stamp; keep (any list), re-assigned
// positions, unfolding and clear renew it; other heads keep theirs; a copy's stamps are its own.
TEST(KVCache, EditStampsChangeWithEveryEditButAnAppend) {
  KVCache cache(cache_config(), KvType::F32);
  fill(cache, 0, 0, 6);
  fill(cache, 0, 1, 6);
  const uint64_t s00 = cache.edit_stamp(0, 0), s01 = cache.edit_stamp(0, 1);
  EXPECT_NE(s00, 0u);
  EXPECT_NE(s00, s01) << "every head draws its own";
  fill(cache, 0, 0, 2, 6);
  EXPECT_EQ(cache.edit_stamp(0, 0), s00) << "an append";
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  cache.keep(0, 0, all);
  const uint64_t after_keep = cache.edit_stamp(0, 0);
  EXPECT_NE(after_keep, s00) << "a keep, even of every entry in place";
  EXPECT_EQ(cache.edit_stamp(0, 1), s01) << "another head";
  const KVCache copy = cache;
  EXPECT_NE(copy.edit_stamp(0, 0), after_keep) << "a copy may go on differently";
  EXPECT_EQ(cache.edit_stamp(0, 0), after_keep) << "copying leaves the original";
  cache.reassign_positions(0, 1);
  EXPECT_NE(cache.edit_stamp(0, 1), s01) << "re-assigned positions";
  const uint64_t before_unfold = cache.edit_stamp(0, 0);
  cache.unfold();
  for (int h = 0; h < cache.n_stored_heads(); ++h) EXPECT_NE(cache.edit_stamp(0, h), before_unfold) << "unfolded head " << h;
  const uint64_t before_clear = cache.edit_stamp(1, 0);
  cache.clear();
  EXPECT_NE(cache.edit_stamp(1, 0), before_clear) << "clear";
}

TEST(KVCache, KeepRejectsBadIndices) {
  KVCache cache(cache_config(), KvType::F32);
  fill(cache, 0, 0, 4);
  EXPECT_THROW(cache.keep(0, 0, std::vector<int>{0, 4}), std::invalid_argument);
  EXPECT_THROW(cache.keep(0, 0, std::vector<int>{-1}), std::invalid_argument);
  EXPECT_THROW(cache.keep(0, 0, std::vector<int>{1, 1}), std::invalid_argument);
  EXPECT_THROW(cache.keep(2, 0, std::vector<int>{}), std::invalid_argument);
  EXPECT_EQ(cache.length(0, 0), 4);  // a rejected keep changes nothing
  cache.keep(0, 0, std::vector<int>{});
  EXPECT_EQ(cache.length(0, 0), 0);
}

TEST(KVCache, BytesAreExactAndTheFreedTailIsReused) {
  KVCache cache(cache_config(), KvType::F32);
  const size_t per_entry = 2 * 6 * sizeof(float) + sizeof(int32_t);
  fill(cache, 0, 0, 100);
  fill(cache, 1, 1, 50);
  EXPECT_EQ(cache.bytes_in_use(), 150 * per_entry);
  EXPECT_EQ(cache.bytes_for_uniform_length(10), 4 * 10 * per_entry);
  std::vector<int> keep(30);
  for (int i = 0; i < 30; ++i) keep[i] = 3 * i;
  cache.keep(0, 0, keep);
  EXPECT_EQ(cache.bytes_in_use(), 80 * per_entry);
  const size_t reserved = cache.bytes_reserved();
  EXPECT_GE(reserved, cache.bytes_in_use());
  fill(cache, 0, 0, 60, 100);  // fits in the freed capacity: no new memory
  EXPECT_EQ(cache.bytes_reserved(), reserved);
  EXPECT_EQ(cache.bytes_in_use(), 140 * per_entry);
  cache.keep(0, 0, std::vector<int>{0});
  cache.shrink_to_fit();
  EXPECT_EQ(cache.bytes_reserved(), cache.bytes_in_use());
  cache.clear();
  EXPECT_EQ(cache.bytes_in_use(), 0u);
  EXPECT_EQ(cache.total_entries(), 0);
}

class PreRope : public ::testing::TestWithParam<RopeStyle> {};

TEST_P(PreRope, KeysBeforeRopeAreRecovered) {
  const ModelConfig config = cache_config(GetParam());
  KVCache cache(config, KvType::F32);
  Rope rope(config);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> raw;
  const std::vector<int> positions = {0, 1, 17, 511, 4095, 9999};
  for (int p : positions) {
    std::vector<float> key(6), value(6, 0.0f);
    for (float& v : key) v = normal(rng);
    raw.push_back(key);
    rope.forward(key.data(), p);
    cache.append(1, 0, p, key.data(), value.data());
  }
  cache.keep(1, 0, std::vector<int>{5, 1, 3});
  const std::vector<float> pre = cache.keys_pre_rope(1, 0);
  ASSERT_EQ(pre.size(), 18u);
  const int kept[] = {5, 1, 3};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_NEAR(pre[i * 6 + j], raw[kept[i]][j], 1e-5) << "entry " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, PreRope, ::testing::Values(RopeStyle::AdjacentPairs, RopeStyle::HalfSplit));

// Records the listener calls as short strings.
class EventLog : public KvCacheListener {
 public:
  void on_append(int l, int h, int32_t p, const float*, const float*) override { add("append", l, h, p); }
  void on_keep(int l, int h, std::span<const int> idx) override { add("keep", l, h, static_cast<int>(idx.size())); }
  void on_write_entry(int l, int h, int t) override { add("write", l, h, t); }
  void on_reassign(int l, int h) override { add("reassign", l, h, 0); }
  void on_codebook(int l, int h) override { add("codebook", l, h, 0); }
  void on_unfold() override { events.push_back("unfold"); }
  void on_clear() override { events.push_back("clear"); }
  void on_replaced() override { events.push_back("replaced"); }
  std::vector<std::string> events;

 private:
  void add(const char* what, int l, int h, int x) {
    events.push_back(std::string(what) + " " + std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(x));
  }
};

TEST(KVCache, ListenerHearsEveryMutationAfterItSucceeded) {
  KVCache cache(cache_config());
  EventLog log;
  cache.set_listener(&log);
  fill(cache, 1, 0, 3);
  cache.keep(1, 0, std::vector<int>{2, 0});
  EXPECT_THROW(cache.keep(1, 0, std::vector<int>{5}), std::invalid_argument);  // refused: not reported
  const std::vector<float> row(cache.head_dim(), 0.5f);
  cache.write_entry(1, 0, 1, row.data(), nullptr);
  cache.reassign_positions(1, 0);
  cache.unfold();
  cache.clear();
  EXPECT_EQ(log.events, (std::vector<std::string>{"append 1,0,0", "append 1,0,1", "append 1,0,2", "keep 1,0,2",
                                                   "write 1,0,1", "reassign 1,0,0", "unfold", "clear"}));
  cache.set_listener(nullptr);
  fill(cache, 0, 0, 1);
  EXPECT_EQ(log.events.size(), 8u);
}

TEST(KVCache, CopiesDoNotCarryTheListenerAndAssignmentReportsAReplacement) {
  KVCache cache(cache_config());
  EventLog log;
  cache.set_listener(&log);
  fill(cache, 0, 1, 2);
  KVCache copy = cache;
  EXPECT_EQ(copy.listener(), nullptr);
  KVCache moved = std::move(copy);
  EXPECT_EQ(moved.listener(), nullptr);
  fill(moved, 0, 1, 1);
  log.events.clear();
  cache = moved;  // the target keeps its listener and hears once, after the contents changed
  EXPECT_EQ(cache.listener(), &log);
  EXPECT_EQ(cache.length(0, 1), 3);
  EXPECT_EQ(log.events, std::vector<std::string>{"replaced"});
  cache = KVCache(cache_config());
  EXPECT_EQ(cache.listener(), &log);
  EXPECT_EQ(cache.length(0, 1), 0);
  EXPECT_EQ(log.events, (std::vector<std::string>{"replaced", "replaced"}));
}

}  // namespace
}  // namespace kvevict
