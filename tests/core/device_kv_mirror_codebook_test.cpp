// SpindleKV's codebook heads on the device (device_kv_codebook.h, DeviceKvMirror's codebooks), on
// the CPU: the twin stands for the device. The CUDA decoder's calls without an observer hand the
// mirror their block; the device matches it against its books, stores the reconstructions and
// logs the entries, and the host catches up from the codes and entries only (sync_host). A
// reference host cache takes every row itself (KVCache::append: the host's own codebook rule); the
// mirrored host must end with exactly its codes, indices, norms and positions, and the twin with
// its reconstructions, in three KvTypes and both codebook scopes, through calls that take the rows
// on the host and the engine's keeps (which renumber codes) in between.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/decode/device_kv_codebook_books.h"
#include "core/decode/rope.h"
#include "core/engine/codebook_stage.h"
#include "device_kv_mirror_rig.h"

namespace kvevict {
namespace {

// Rows near a few directions (a pre-RoPE key near base_k[j], then rotated to its position; a value
// near base_v[j]), so that rows match codes (cosine above theta) as often as they do not.
struct CorrelatedRows {
  std::mt19937 rng{17};
  std::vector<std::vector<float>> base_k, base_v;
  Rope rope;
  int d = 0;
  CorrelatedRows(const ModelConfig& c, int directions) : rope(c), d(c.head_dim) {
    std::normal_distribution<float> normal;
    for (int j = 0; j < directions; ++j) {
      base_k.emplace_back(static_cast<size_t>(d));
      base_v.emplace_back(static_cast<size_t>(d));
      for (float& x : base_k.back()) x = normal(rng);
      for (float& x : base_v.back()) x = normal(rng);
    }
  }
  // [n][heads * d] keys and values for positions position, position + 1, ...
  std::pair<std::vector<float>, std::vector<float>> block(int n, int heads, int position) {
    std::normal_distribution<float> normal;
    std::vector<float> k(static_cast<size_t>(n) * heads * d), v(k.size());
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < heads; ++h) {
        float* key = k.data() + (static_cast<size_t>(i) * heads + h) * d;
        float* value = v.data() + (static_cast<size_t>(i) * heads + h) * d;
        const bool fresh = rng() % 3 == 0;  // a new direction: a new code
        const size_t j = rng() % base_k.size();
        const float scale = 0.5f + static_cast<float>(rng() % 100) / 50.0f;
        for (int e = 0; e < d; ++e) {
          key[e] = fresh ? normal(rng) : base_k[j][static_cast<size_t>(e)] * scale + 0.01f * normal(rng);
          value[e] = fresh ? normal(rng) : base_v[j][static_cast<size_t>(e)] * scale + 0.01f * normal(rng);
        }
        rope.reserve(position + i + 1);
        rope.forward(key, position + i);
      }
    return {std::move(k), std::move(v)};
  }
};

// Entries (summed over heads) whose key joined a code another entry of the head also uses.
int64_t shared_key_codes(const KVCache& cache) {
  int64_t n = 0;
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const std::vector<int32_t>& index = cache.codebook(l, h)->key_index;
      std::vector<int32_t> sorted(index);
      std::sort(sorted.begin(), sorted.end());
      n += static_cast<int64_t>(sorted.size()) -
           static_cast<int64_t>(std::unique(sorted.begin(), sorted.end()) - sorted.begin());
    }
  return n;
}

int64_t key_codes_held(const KVCache& cache) {
  int64_t n = 0;
  for (int l = 0; l < cache.n_layers(); ++l) {
    if (const LayerCodebook* shared = cache.layer_codebook(l)) {
      n += static_cast<int64_t>(shared->key_codes.size()) / cache.head_dim();
      continue;
    }
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      n += static_cast<int64_t>(cache.codebook(l, h)->key_codes.size()) / cache.head_dim();
  }
  return n;
}

// A prompt of `n` rows that the host takes (as a call with an observer gives it), on every layer of
// the rig: the twin, the mirrored host cache and the reference.
void prompt_taken_by_the_host(DecoderModeRig& rig, CorrelatedRows& rows, int n) {
  const auto [k, v] = rows.block(n, rig.cache.n_kv_heads(), 0);
  for (int l = 0; l < rig.cache.n_layers(); ++l) {
    rig.mirror.flush(l);
    append_block(rig.twin, rig.reference, &rig.cache, l, 0, k, v);
    rig.mirror.flush(l);
  }
}

PolicyMerge codebook_merge(MergeScope scope) {
  PolicyMerge m;
  m.enabled = true;
  m.method = MergeMethod::Codebook;
  m.theta_key = 0.9;
  m.theta_value = 0.9;
  m.scope = scope;
  return m;
}

TEST(DeviceKvMirrorCodebook, BlocksMatchedOnTheDeviceCatchUpToTheHostsOwnCodebook) {
  ModelConfig c = two_layer_config();
  c.n_kv_heads = 3, c.n_heads = 6, c.dim = 48;
  const int kv_dim = c.n_kv_heads * c.head_dim;
  for (const MergeScope scope : {MergeScope::PerHead, MergeScope::PerLayerAcrossHeads})
    for (const KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
      const std::string what = std::string(kv_type_name(type)) +
                               (scope == MergeScope::PerHead ? ", a book per head" : ", one book per layer");
      DecoderModeRig rig(c, type);
      KVCache &cache = rig.cache, &reference = rig.reference;
      CorrelatedRows rows(c, 4);
      std::mt19937 rng(5);
      prompt_taken_by_the_host(rig, rows, 16);  // then both caches get the same codebooks
      apply_codebook_stage(codebook_merge(scope), cache);
      apply_codebook_stage(codebook_merge(scope), reference);
      rig.mirror.flush_all();
      ASSERT_TRUE(twin_equals_host(rig.twin, cache)) << what;
      int position = 16;
      int64_t codes_added_on_device = 0;
      for (int round = 0; round < 24; ++round) {
        const bool observer = round % 4 == 3;  // a call that reads the host cache: it takes the rows
        if (observer) rig.mirror.sync_host();
        const int64_t codes_before = key_codes_held(cache);  // as of the last catch-up
        const int n = 1 + static_cast<int>(rng() % 3);
        const auto [k, v] = rows.block(n, c.n_kv_heads, position);
        for (int l = 0; l < c.n_layers; ++l) {
          rig.mirror.flush(l);
          append_block(rig.twin, reference, observer ? &cache : nullptr, l, position, k, v);
          if (!observer) {
            EXPECT_FALSE(rig.mirror.defer_host_append(l, n, position)) << what << ": no block handed over";
            ASSERT_TRUE(rig.mirror.defer_host_append(l, n, position, k.data(), v.data(), kv_dim)) << what;
          }
          rig.mirror.flush(l);
        }
        position += n;
        if (!observer && round % 2 == 0) continue;  // the host lags across calls too
        if (!observer) {
          rig.mirror.sync_host();
          codes_added_on_device += key_codes_held(cache) - codes_before;
        }
        ASSERT_TRUE(same_codebooks(cache, reference)) << what << ", round " << round;
        ASSERT_TRUE(twin_equals_host(rig.twin, cache)) << what << ", round " << round;
        if (round % 8 == 7)  // the engine's turn: keeps drop and renumber codes (a whole reload)
          for (int l = 0; l < c.n_layers; ++l)
            for (int h = 0; h < c.n_kv_heads; ++h) {
              std::vector<int> keep;
              for (int t = 0; t < cache.length(l, h); ++t)
                if (rng() % 3 != 0) keep.push_back(t);
              std::shuffle(keep.begin(), keep.end(), rng);
              cache.keep(l, h, keep);
              reference.keep(l, h, keep);
            }
      }
      rig.mirror.sync_host();
      rig.mirror.flush_all();
      ASSERT_TRUE(same_codebooks(cache, reference)) << what;
      EXPECT_TRUE(twin_equals_host(rig.twin, cache)) << what;
      EXPECT_TRUE(twin_equals_host(rig.twin, reference)) << what;
      const DeviceKvMirror::Counts& counts = rig.mirror.counts();
      EXPECT_GT(counts.codebook_rows_on_device, 0) << what;
      EXPECT_EQ(counts.codebook_rows_on_device, counts.rows_deferred) << what;
      EXPECT_EQ(counts.rows_read, counts.rows_deferred) << what << ": the entries came back, nothing else";
      EXPECT_GT(codes_added_on_device, 0) << what << ": some rows became codes on the device";
      EXPECT_GT(shared_key_codes(cache), 0) << what << ": some rows joined a code";
      EXPECT_GT(counts.codes_uploaded, 0) << what;
    }
}

// The eval's cycle and the decoder's restore: a snapshot of both sides after a catch-up, more
// blocks matched on the device, then both sides restored (the decoder's way: the host cache
// assigned, the device restored from its own snapshot, mark_synced) and the same blocks again.
// The device must forget the codes it added after the snapshot (the books are sent again), so the
// host ends as a reference restored from the same snapshot that appended every row itself.
TEST(DeviceKvMirrorCodebook, ARestoreSendsTheRestoredBooksAgain) {
  const ModelConfig c = two_layer_config();
  const int kv_dim = c.n_kv_heads * c.head_dim;
  for (const MergeScope scope : {MergeScope::PerHead, MergeScope::PerLayerAcrossHeads}) {
    DecoderModeRig rig(c, KvType::F16);
    CorrelatedRows rows(c, 3);
    prompt_taken_by_the_host(rig, rows, 12);
    apply_codebook_stage(codebook_merge(scope), rig.cache);
    apply_codebook_stage(codebook_merge(scope), rig.reference);
    rig.mirror.flush_all();
    const auto deferred_block = [&](int position, const std::vector<float>& k, const std::vector<float>& v) {
      for (int l = 0; l < c.n_layers; ++l) {
        rig.mirror.flush(l);
        append_block(rig.twin, rig.reference, nullptr, l, position, k, v);
        ASSERT_TRUE(rig.mirror.defer_host_append(l, 1, position, k.data(), v.data(), kv_dim));
        rig.mirror.flush(l);
      }
    };
    const KVCache saved_host = rig.cache, saved_reference = rig.reference;
    const DeviceKvTwin::Snapshot saved_device = rig.twin.snapshot();
    std::vector<std::pair<std::vector<float>, std::vector<float>>> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(rows.block(1, c.n_kv_heads, 12 + i));
    for (int i = 0; i < 6; ++i) deferred_block(12 + i, blocks[i].first, blocks[i].second);
    rig.mirror.sync_host();
    ASSERT_TRUE(same_codebooks(rig.cache, rig.reference));
    // Restore, then a different continuation from the same point.
    rig.cache = saved_host;
    rig.twin.restore(saved_device);
    rig.mirror.mark_synced();
    rig.reference = saved_reference;
    for (int i = 5; i >= 0; --i) deferred_block(12 + (5 - i), blocks[i].first, blocks[i].second);
    rig.mirror.sync_host();
    rig.mirror.flush_all();
    EXPECT_TRUE(same_codebooks(rig.cache, rig.reference)) << "after the restore";
    EXPECT_TRUE(twin_equals_host(rig.twin, rig.cache)) << "after the restore";
  }
}

// The device's books stay in step only where the host's do: a pending change (a keep renumbers
// codes) or re-assigned positions make the next block go through the host; a flush sends the books
// again and the next block is matched on the device.
TEST(DeviceKvMirrorCodebook, BlocksGoThroughTheHostWhileTheBooksAreNotCurrent) {
  const ModelConfig c = two_layer_config();
  const int kv_dim = c.n_kv_heads * c.head_dim;
  DecoderModeRig rig(c, KvType::F16);
  CorrelatedRows rows(c, 2);
  prompt_taken_by_the_host(rig, rows, 6);
  apply_codebook_stage(codebook_merge(MergeScope::PerHead), rig.cache);
  rig.mirror.flush_all();
  const auto [k1, v1] = rows.block(1, c.n_kv_heads, 6);
  rig.cache.keep(1, 0, std::vector<int>{0, 2, 3, 4, 5});  // pending until the next flush
  EXPECT_FALSE(rig.mirror.defer_host_append(1, 1, 6, k1.data(), v1.data(), kv_dim)) << "a keep not flushed";
  rig.mirror.flush(1);
  rig.cache.reassign_positions(1, 1);
  rig.mirror.flush(1);
  EXPECT_FALSE(rig.mirror.defer_host_append(1, 1, 6, k1.data(), v1.data(), kv_dim)) << "re-assigned positions";
  EXPECT_EQ(rig.mirror.counts().codebook_rows_on_device, 0);
  EXPECT_EQ(rig.mirror.host_lag(1), 0);
  // Layer 0's books are current: its block is matched on the device, and the host catches up.
  rig.mirror.flush(0);
  rig.twin.append(0, 1, k1.data(), v1.data(), kv_dim, std::vector<int32_t>(static_cast<size_t>(c.n_kv_heads), 6));
  ASSERT_TRUE(rig.mirror.defer_host_append(0, 1, 6, k1.data(), v1.data(), kv_dim));
  EXPECT_EQ(rig.mirror.host_lag(0), 1);
  EXPECT_EQ(rig.mirror.counts().codebook_rows_on_device, c.n_kv_heads);
  rig.mirror.sync_host();
  EXPECT_EQ(rig.cache.length(0, 0), 7);
  rig.mirror.flush_all();
  EXPECT_TRUE(twin_equals_host(rig.twin, rig.cache));
}

TEST(DeviceKvMirrorCodebook, TheHostsCatchUpRefusesEntriesThatNameNoCode) {
  const ModelConfig c = two_layer_config();
  KVCache cache(c, KvType::F16);
  CorrelatedRows rows(c, 2);
  const auto [k, v] = rows.block(4, c.n_kv_heads, 0);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      for (int i = 0; i < 4; ++i) {
        const size_t at = (static_cast<size_t>(i) * c.n_kv_heads + h) * c.head_dim;
        cache.append(l, h, i, k.data() + at, v.data() + at);
      }
  const std::vector<int32_t> positions{4};
  EXPECT_THROW(cache.append_codebook_entries(0, 0, positions, std::vector<CodebookEntry>{{0, 1.0f, 0, 1.0f}}),
               std::logic_error) << "a dense head";
  EXPECT_THROW(cache.extend_codebook_codes(0, 0, std::vector<float>(8), {}), std::logic_error);
  apply_codebook_stage(codebook_merge(MergeScope::PerHead), cache);
  const int key_codes = static_cast<int>(cache.codebook(0, 0)->key_codes.size()) / c.head_dim;
  const KVCache before = cache;
  EXPECT_THROW(cache.append_codebook_entries(0, 0, positions, std::vector<CodebookEntry>{{key_codes, 1.0f, 0, 1.0f}}),
               std::invalid_argument);
  EXPECT_THROW(cache.append_codebook_entries(0, 0, positions, std::vector<CodebookEntry>{{0, 1.0f, -1, 1.0f}}),
               std::invalid_argument);
  EXPECT_THROW(cache.append_codebook_entries(0, 0, positions, std::vector<CodebookEntry>{}), std::invalid_argument);
  EXPECT_THROW(cache.extend_codebook_codes(0, 0, std::vector<float>(3), {}), std::invalid_argument);
  EXPECT_TRUE(same_codebooks(cache, before)) << "a refusal changes nothing";
  cache.extend_codebook_codes(0, 0, std::vector<float>(static_cast<size_t>(c.head_dim), 0.5f), {});
  cache.append_codebook_entries(0, 0, positions, std::vector<CodebookEntry>{{key_codes, 2.0f, 0, 1.0f}});
  EXPECT_EQ(cache.length(0, 0), 5);
  EXPECT_EQ(cache.codebook(0, 0)->key_index.back(), key_codes);
}

TEST(DeviceKvMirrorCodebook, TheBookkeepingRefusesWhatTheDeviceCannotHold) {
  DeviceCodebookBooks books(2, 4);
  DeviceCodebookLoad load;
  load.books.resize(3);
  load.theta_key = load.theta_value = {0.9, 0.9};
  EXPECT_THROW(books.load(load), std::invalid_argument) << "three books for two heads";
  load.books.resize(2);
  load.theta_key = {0.9};
  EXPECT_THROW(books.load(load), std::invalid_argument) << "one threshold for two heads";
  load.theta_key = {0.9, 0.9};
  load.books[0].key_codes.resize(6);
  EXPECT_THROW(books.load(load), std::invalid_argument) << "a code and a half";
  load.books[0].key_codes.resize(8);
  load.books[1].first_key_code = 1;
  EXPECT_THROW(books.load(load), std::invalid_argument) << "codes from past what the device holds";
  load.books[1].first_key_code = 0;
  EXPECT_EQ(books.load(load), 2);
  EXPECT_EQ(books.known_key(0), 2);
  EXPECT_EQ(books.codes_needed_for(3), 5);
  EXPECT_THROW(books.append_args(3, nullptr, nullptr, 8, 0, std::vector<int64_t>(2).data(), RopeTableView{},
                                 nullptr, nullptr, KvType::F16, nullptr, nullptr, nullptr, nullptr, nullptr),
               std::logic_error)
      << "no room was planned";
  const auto no_read = [](bool, int, int32_t, int32_t, float*) {};
  const auto no_log = [](int, int64_t, CodebookEntry*) {};
  EXPECT_THROW(books.news({1, 0}, {0, 0}, no_read, no_log), std::logic_error) << "fewer codes than the host knew";
  EXPECT_THROW(books.news({9, 0}, {0, 0}, no_read, no_log), std::logic_error) << "more codes than planned";
  DeviceCodebookBooks empty(2, 4);
  EXPECT_THROW(empty.codes_needed_for(1), std::logic_error) << "a layer without books";
  EXPECT_THROW(books.grown(1, 0), std::logic_error) << "storage laid for fewer codes than the books hold";
}

// The storage's capacity (the device's and the twin's): room for the need plus slack, so a load's
// first decode steps re-lay nothing; geometric growth over a stream of one-row appends; given back
// when the need falls under half. Doubling, the first policy, laid 2K codes for K after the first
// decode step and kept them forever.
TEST(DeviceKvMirrorCodebook, TheStorageIsPlannedWithSlackGrowsGeometricallyAndIsGivenBack) {
  using B = DeviceCodebookBooks;
  EXPECT_EQ(B::planned_capacity(0, 0), 0);  // nothing laid for nothing
  const int64_t K = 65536;  // a book's codes after a 128K prompt's eviction
  const int64_t loaded = B::planned_capacity(0, K);
  EXPECT_EQ(loaded, K + K / 8 + B::kCapacitySlack);
  // Decode steps of a shared book over 8 heads: 8 codes per step at most.
  int64_t capacity = loaded, relays = 0, most = loaded;
  for (int64_t need = K + 8; need <= 4 * K; need += 8) {
    const int64_t next = B::planned_capacity(capacity, need);
    ASSERT_GE(next, need);
    if (next != capacity) {
      ++relays;
      EXPECT_GE(next, capacity + capacity / 9) << "growth is geometric";
    }
    capacity = next;
    most = std::max(most, capacity);
    EXPECT_LE(capacity, need + need / 8 + B::kCapacitySlack) << "never more than an eighth over the need";
  }
  EXPECT_EQ(B::planned_capacity(loaded, K + K / 8), loaded) << "the slack holds the first decode steps";
  EXPECT_LE(relays, 14) << "O(log n) re-lays for 3K more codes";
  EXPECT_LE(most, 4 * K + K / 2 + B::kCapacitySlack);
  // A reload that needs far less (a new prompt, a keep that dropped codes): given back.
  EXPECT_EQ(B::planned_capacity(capacity, K / 4), K / 4 + K / 32 + B::kCapacitySlack);
  EXPECT_EQ(B::planned_capacity(capacity, 3 * K), capacity) << "not for a need above half: no churn";
  EXPECT_THROW(B::planned_capacity(0, -1), std::logic_error);
}

}  // namespace
}  // namespace kvevict
