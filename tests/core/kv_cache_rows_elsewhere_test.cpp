// KVCache heads whose rows are held elsewhere (KVCache::append_position, take_rows): the host half
// of a device-resident cache. Lengths, positions, keeps and byte counts work; every read or edit of
// a row that is not there throws instead of reading nothing; take_rows brings the rows back and the
// head then behaves as if it had held them all along.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/kv_cache.h"

namespace kvevict {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.n_layers = 2;
  c.dim = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.hidden_dim = 8;
  c.vocab_size = 100;
  c.context_length = 1000;
  return c;
}

// Row t of a head: [t, t + 0.25, t + 0.5, t + 0.75] (exact in F16), keys and values alike (values negated).
std::vector<float> rows_of(int n, int d, float sign) {
  std::vector<float> out(static_cast<size_t>(n) * d);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) out[static_cast<size_t>(t) * d + i] = sign * (t + 0.25f * i);
  return out;
}

class Events : public KvCacheListener {
 public:
  void on_append(int l, int h, int32_t p, const float* k, const float* v) override {
    log.push_back("append " + std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(p) +
                  (k || v ? " rows" : " position"));
  }
  void on_keep(int, int, std::span<const int> idx) override { log.push_back("keep " + std::to_string(idx.size())); }
  void on_write_entry(int, int, int t) override { log.push_back("write " + std::to_string(t)); }
  void on_reassign(int, int) override { log.push_back("reassign"); }
  void on_codebook(int, int) override { log.push_back("codebook"); }
  void on_unfold() override { log.push_back("unfold"); }
  void on_clear() override { log.push_back("clear"); }
  void on_replaced() override { log.push_back("replaced"); }
  std::vector<std::string> log;
};

TEST(KvCacheRowsElsewhere, PositionsKeepsAndByteCountsWorkWithoutRows) {
  KVCache cache(small_config(), KvType::F16);
  for (int t = 0; t < 6; ++t) cache.append_position(1, 0, 10 + t);
  EXPECT_TRUE(cache.rows_held_elsewhere(1, 0));
  EXPECT_FALSE(cache.rows_held_elsewhere(1, 1));  // empty: holds nothing anywhere
  EXPECT_EQ(cache.length(1, 0), 6);
  EXPECT_EQ(cache.total_entries(), 6);
  cache.keep(1, 0, std::vector<int>{4, 1, 2});  // score order: positions follow
  ASSERT_EQ(cache.length(1, 0), 3);
  EXPECT_EQ(std::vector<int32_t>(cache.positions(1, 0), cache.positions(1, 0) + 3), (std::vector<int32_t>{14, 11, 12}));
  // bytes_in_use describes the cache (rows held on the device count); this object holds positions only.
  EXPECT_EQ(cache.bytes_in_use(), 3 * (2 * 4 * sizeof(uint16_t) + sizeof(int32_t)));
  EXPECT_LT(cache.bytes_reserved(), 6 * 2 * 4 * sizeof(uint16_t));  // less than the rows appended
}

TEST(KvCacheRowsElsewhere, EveryRowReaderAndEditorRefuses) {
  KVCache cache(small_config(), KvType::F32);
  for (int t = 0; t < 3; ++t) cache.append_position(0, 1, t);
  std::vector<float> out(12), scratch;
  const std::vector<float> row(4, 1.0f);
  EXPECT_THROW(cache.reconstruct_keys(0, 1, 0, 3, out.data()), std::logic_error);
  EXPECT_THROW(cache.reconstruct_values(0, 1, 0, 3, out.data()), std::logic_error);
  EXPECT_THROW(cache.keys_or_reconstruct(0, 1, scratch), std::logic_error);
  EXPECT_THROW(cache.values_or_reconstruct(0, 1, scratch), std::logic_error);
  EXPECT_THROW(cache.keys(0, 1), std::logic_error);
  EXPECT_THROW(cache.stored_keys(0, 1), std::logic_error);
  EXPECT_THROW(cache.keys_pre_rope(0, 1), std::logic_error);
  EXPECT_THROW(cache.write_entry(0, 1, 0, row.data(), row.data()), std::logic_error);
  EXPECT_THROW(cache.append(0, 1, 3, row.data(), row.data()), std::logic_error);  // every row or none
  EXPECT_THROW(cache.unfold(), std::logic_error);
  CodebookHead cb;
  cb.key_codes = cb.value_codes = row;
  cb.key_index = cb.value_index = {0, 0, 0};
  cb.key_norm = cb.value_norm = {1, 1, 1};
  EXPECT_THROW(cache.set_codebook(0, 1, cb), std::logic_error);
  EXPECT_EQ(cache.length(0, 1), 3);  // nothing changed
  // The other heads are untouched by the rule; a head holding rows refuses position-only appends.
  cache.append(0, 0, 0, row.data(), row.data());
  EXPECT_THROW(cache.append_position(0, 0, 1), std::logic_error);
  EXPECT_NO_THROW(cache.keys(0, 0));
}

// release_rows, take_rows' inverse: a head holding rows drops them (their memory freed, nothing told
// to the listener: the contents do not change) and holds its positions only; taking the same rows
// back gives it its stored words again. Refused: a head holding no row, an unfolded cache.
TEST(KvCacheRowsElsewhere, ReleaseRowsIsTakeRowsInverse) {
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16}) {
    KVCache cache(small_config(), type);
    const std::vector<float> keys = rows_of(6, 4, 2.0f), values = rows_of(6, 4, -3.0f);
    for (int t = 0; t < 6; ++t) cache.append(0, 1, 4 + t, keys.data() + t * 4, values.data() + t * 4);
    std::vector<float> stored_k(6 * 4), stored_v(6 * 4);
    cache.reconstruct_keys(0, 1, 0, 6, stored_k.data());
    cache.reconstruct_values(0, 1, 0, 6, stored_v.data());
    const size_t before = cache.bytes_reserved();
    Events events;
    cache.set_listener(&events);
    cache.release_rows(0, 1);
    EXPECT_TRUE(events.log.empty());
    EXPECT_TRUE(cache.rows_held_elsewhere(0, 1));
    EXPECT_LT(cache.bytes_reserved(), before) << kv_type_name(type);
    EXPECT_EQ(cache.length(0, 1), 6);
    EXPECT_EQ(cache.positions(0, 1)[5], 9);
    std::vector<float> out(6 * 4);
    EXPECT_THROW(cache.reconstruct_keys(0, 1, 0, 6, out.data()), std::logic_error);
    EXPECT_THROW(cache.release_rows(0, 1), std::logic_error) << "holds no row now";
    EXPECT_THROW(cache.release_rows(0, 0), std::logic_error) << "an empty head";
    cache.take_rows(0, 1, stored_k.data(), stored_v.data());
    cache.reconstruct_keys(0, 1, 0, 6, out.data());
    EXPECT_EQ(out, stored_k) << kv_type_name(type);
    cache.reconstruct_values(0, 1, 0, 6, out.data());
    EXPECT_EQ(out, stored_v) << kv_type_name(type);
    cache.set_listener(nullptr);
  }
}

TEST(KvCacheRowsElsewhere, TakeRowsGivesTheHeadWhatItWouldHaveHeld) {
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16}) {
    KVCache held(small_config(), type), elsewhere(small_config(), type);
    const std::vector<float> keys = rows_of(5, 4, 1.0f), values = rows_of(5, 4, -1.0f);
    for (int t = 0; t < 5; ++t) {
      held.append(1, 1, 7 + t, keys.data() + t * 4, values.data() + t * 4);
      elsewhere.append_position(1, 1, 7 + t);
    }
    const std::vector<int> kept = {3, 0, 4};
    held.keep(1, 1, kept);
    elsewhere.keep(1, 1, kept);
    std::vector<float> k(3 * 4), v(3 * 4);
    for (int i = 0; i < 3; ++i)
      for (int c = 0; c < 4; ++c) {
        k[static_cast<size_t>(i) * 4 + c] = keys[static_cast<size_t>(kept[i]) * 4 + c];
        v[static_cast<size_t>(i) * 4 + c] = values[static_cast<size_t>(kept[i]) * 4 + c];
      }
    Events events;
    elsewhere.set_listener(&events);
    elsewhere.take_rows(1, 1, k.data(), v.data());
    EXPECT_EQ(events.log, (std::vector<std::string>{"write 0", "write 1", "write 2"}));
    EXPECT_FALSE(elsewhere.rows_held_elsewhere(1, 1));
    EXPECT_THROW(elsewhere.take_rows(1, 1, k.data(), v.data()), std::logic_error);
    std::vector<float> a(12), b(12);
    held.reconstruct_keys(1, 1, 0, 3, a.data());
    elsewhere.reconstruct_keys(1, 1, 0, 3, b.data());
    EXPECT_EQ(a, b) << kv_type_name(type);
    held.reconstruct_values(1, 1, 0, 3, a.data());
    elsewhere.reconstruct_values(1, 1, 0, 3, b.data());
    EXPECT_EQ(a, b) << kv_type_name(type);
    // From now on it holds rows: appends take rows again.
    elsewhere.append(1, 1, 20, keys.data(), values.data());
    EXPECT_EQ(elsewhere.length(1, 1), 4);
    elsewhere.set_listener(nullptr);
  }
}

TEST(KvCacheRowsElsewhere, ListenerHearsPositionOnlyAppendsAndClearEndsTheState) {
  KVCache cache(small_config());
  Events events;
  cache.set_listener(&events);
  cache.append_position(0, 0, 5);
  cache.keep(0, 0, std::vector<int>{0});
  cache.clear();
  EXPECT_FALSE(cache.rows_held_elsewhere(0, 0));
  const std::vector<float> row(4, 2.0f);
  cache.append(0, 0, 0, row.data(), row.data());  // an emptied head holds rows again
  EXPECT_EQ(events.log, (std::vector<std::string>{"append 0,0,5 position", "keep 1", "clear", "append 0,0,0 rows"}));
  // A copy keeps the state (a snapshot of a device-resident cache).
  KVCache other(small_config());
  other.append_position(1, 1, 3);
  const KVCache copy = other;
  EXPECT_TRUE(copy.rows_held_elsewhere(1, 1));
  cache.set_listener(nullptr);
  // Unfolded caches have no position-only appends.
  KVCache unfolded(small_config());
  unfolded.unfold();
  EXPECT_THROW(unfolded.append_position(0, 0, 0), std::logic_error);
}

// Re-assigning the positions of a row-less head only re-numbers it (the holder re-rotates the rows):
// positions become the cache indices, the head is marked, its norms are dropped (the rotation
// changes them by rounding), the listener hears it, and the RoPE table the holder rotates with
// covers every old position and new index.
TEST(KvCacheRowsElsewhere, ReassignedPositionsOnlyRenumberARowlessHead) {
  KVCache cache(small_config(), KvType::F16);
  Events events;
  const RowNorms norms{1.0f, 1.0f};
  for (int32_t p : {40, 7, 300, 12}) cache.append_position(1, 1, p, &norms);
  cache.set_listener(&events);
  cache.reassign_positions(1, 1);
  EXPECT_TRUE(cache.positions_reassigned(1, 1));
  EXPECT_EQ(std::vector<int32_t>(cache.positions(1, 1), cache.positions(1, 1) + 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_FALSE(cache.holds_row_norms(1, 1));
  EXPECT_TRUE(cache.rows_held_elsewhere(1, 1));
  EXPECT_GT(cache.rope_table().positions, 300) << "the holder needs the table at every old position";
  EXPECT_EQ(cache.rope_table().half, 2);
  ASSERT_EQ(events.log.size(), 1u);
  EXPECT_EQ(events.log[0], "reassign");
  EXPECT_EQ(cache.next_position(1, 1, 1000), 4);  // the next token continues at the cache length
  cache.set_listener(nullptr);
}

// The norms handed over with positions (KVCache::held_row_norms): they follow keeps (score order
// included), equal what the head computes from its rows once it takes them (the same words, the
// same function: row_norms.h), and are held only while every entry brought them.
TEST(KvCacheRowsElsewhere, HeldRowNormsFollowKeepsAndAreHeldOnlyWhenComplete) {
  const int d = 4, n = 7;
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    const std::vector<float> keys = rows_of(n, d, 1.0f), values = rows_of(n, d, -1.0f);
    std::vector<float> key_norms(n), value_norms(n);
    compute_row_norms(keys.data(), n, d, key_norms.data());  // the rows are exact in every KvType
    compute_row_norms(values.data(), n, d, value_norms.data());
    KVCache cache(small_config(), type);
    for (int t = 0; t < n; ++t) {
      const RowNorms norms{key_norms[t], value_norms[t]};
      cache.append_position(0, 1, 100 + t, &norms);
    }
    ASSERT_TRUE(cache.holds_row_norms(0, 1));
    EXPECT_GT(cache.bytes_reserved(), n * sizeof(int32_t)) << "the norms are held";
    const std::vector<int> kept = {5, 0, 3, 6};
    cache.keep(0, 1, kept);
    std::span<const RowNorms> held = cache.held_row_norms(0, 1);
    ASSERT_EQ(held.size(), kept.size());
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_EQ(held[i].key, key_norms[kept[i]]) << kv_type_name(type) << " entry " << i;
      EXPECT_EQ(held[i].value, value_norms[kept[i]]) << kv_type_name(type) << " entry " << i;
      EXPECT_EQ(cache.positions(0, 1)[i], 100 + kept[i]);
    }
    // Taking the rows: the head computes its norms from them now, the same bits.
    std::vector<float> kept_keys, kept_values;
    for (int t : kept) {
      kept_keys.insert(kept_keys.end(), keys.begin() + t * d, keys.begin() + (t + 1) * d);
      kept_values.insert(kept_values.end(), values.begin() + t * d, values.begin() + (t + 1) * d);
    }
    cache.take_rows(0, 1, kept_keys.data(), kept_values.data());
    EXPECT_FALSE(cache.holds_row_norms(0, 1));
    EXPECT_THROW((void)cache.held_row_norms(0, 1), std::logic_error) << "a head holding rows computes them";
    std::vector<float> scratch, from_rows(kept.size());
    compute_row_norms(cache.keys_or_reconstruct(0, 1, scratch), static_cast<int>(kept.size()), d, from_rows.data());
    for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(from_rows[i], key_norms[kept[i]]);
  }
  // An entry without norms drops them; an empty head starts afresh; set_held_row_norms gives them back.
  KVCache cache(small_config(), KvType::F16);
  const RowNorms one{1.0f, 2.0f};
  cache.append_position(1, 0, 0, &one);
  cache.append_position(1, 0, 1, nullptr);
  cache.append_position(1, 0, 2, &one);
  EXPECT_FALSE(cache.holds_row_norms(1, 0));
  try {
    (void)cache.held_row_norms(1, 0);
    ADD_FAILURE() << "incomplete norms were handed out";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("norms were not handed over"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cache.set_held_row_norms(1, 0, std::vector<RowNorms>(2, one)), std::invalid_argument);
  cache.set_held_row_norms(1, 0, std::vector<RowNorms>(3, one));
  EXPECT_TRUE(cache.holds_row_norms(1, 0));
  EXPECT_EQ(cache.held_row_norms(1, 0)[2].value, 2.0f);
  cache.keep(1, 0, std::vector<int>{});
  cache.append_position(1, 0, 9, &one);  // empty again: a fresh start with norms
  EXPECT_TRUE(cache.holds_row_norms(1, 0));
  EXPECT_THROW(cache.set_held_row_norms(1, 1, {}), std::logic_error) << "an empty head holds no rows elsewhere";
  cache.clear();
  EXPECT_FALSE(cache.holds_row_norms(1, 0));
}

}  // namespace
}  // namespace kvevict
