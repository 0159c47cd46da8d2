// The device KV mirror (core/decode/device_kv_mirror.h) on the CPU: a DeviceKvTwin follows the
// CPU decoder's host KVCache while the eviction engine runs shipped policies on stories260K
// (prefill, eviction, decode). After every forward call every (layer, head) of the twin must equal
// the host cache bit for bit: the stored words of the cache's KvType (a codebook head: its
// reconstruction rounded as the cache would store it) and the positions. The policies are chosen
// so that every mutation event occurs: ascending keeps (snapkv), score-ordered keeps and cascading
// eviction during the prefill (cake), per-step keeps (h2o), re-assigned positions (streamingllm),
// merged entries (d2o: write_entry), zeroed key channels (think: write_entry), codebook heads
// (spindlekv), and an eval-style snapshot/restore cycle (whole-cache assignment). A control shows
// the check fails when the mirror is not flushed.
#include <algorithm>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <memory>
#include <random>
#include <string>

#include "core/decode/decoder.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "device_kv_mirror_rig.h"
#include "device_kv_test_ops.h"
#include "dsl/policy_loader.h"
#include "stories_prompt_test.h"

namespace kvevict {
namespace {

// Forwards to the engine, flushing layer l before the engine sees it (as the CUDA decoder flushes
// before appending): keeps then stay pending across the next forward call's host appends.
class FlushingObserver : public ForwardObserver {
 public:
  FlushingObserver(ForwardObserver& inner, DeviceKvMirror& mirror) : inner_(inner), mirror_(mirror) {}
  ObservationRequest request() const override { return inner_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    mirror_.flush(s.layer);
    inner_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { inner_.after_forward(n, cache); }

 private:
  ForwardObserver& inner_;
  DeviceKvMirror& mirror_;
};

struct Case {
  std::string policy;
  std::map<std::string, std::string> params;
  std::string budget;
  KvType type = KvType::F16;
};

class DeviceKvMirrorTest : public test::StoriesPromptTest {
 protected:
  // Prefill + `steps` greedy decode steps under the policy; the twin is checked after each call.
  // Returns what the mirror sent, and `appended`: the rows the decoder appended in all.
  static DeviceKvMirror::Counts run_and_check(const Case& c, int steps, int64_t* appended = nullptr) {
    const auto policy = load_policy(c.policy, c.params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = c.type});
    DeviceKvTwin twin(geometry_of(decoder->cache()));
    DeviceKvBackendFor<DeviceKvTwin> backend(twin);
    DeviceKvMirror mirror(decoder->cache(), backend, MirrorAppends::Host);
    EvictionEngine engine(*policy, model_->config, {Budget::parse(c.budget), 0});
    FlushingObserver observer(engine, mirror);
    const int64_t heads = int64_t(model_->config.n_layers) * model_->config.n_kv_heads;
    if (appended) *appended = (S() + steps) * heads;
    std::vector<float> logits = decoder->forward(std::span<const int>(tokens_), &observer);
    mirror.flush_all();
    EXPECT_TRUE(twin_equals_host(twin, decoder->cache())) << c.policy << " after the prefill";
    EXPECT_LT(decoder->cache().total_entries(), S() * heads) << c.policy << " evicted nothing";
    for (int step = 0; step < steps; ++step) {
      const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      logits = decoder->forward(std::span<const int>(&next, 1), &observer);
      mirror.flush_all();
      EXPECT_TRUE(twin_equals_host(twin, decoder->cache())) << c.policy << " after decode step " << step;
    }
    std::printf("%s: %lld compactions, %lld rows written, %lld head resyncs\n", c.policy.c_str(),
                static_cast<long long>(mirror.counts().compactions), static_cast<long long>(mirror.counts().rows_written),
                static_cast<long long>(mirror.counts().head_resyncs));
    return mirror.counts();
  }
  static int64_t heads() { return int64_t(model_->config.n_layers) * model_->config.n_kv_heads; }
};

// Each case also checks that its event happened (the counts of what the mirror sent).
TEST_F(DeviceKvMirrorTest, SnapKVAscendingKeeps) {
  EXPECT_EQ(run_and_check({"snapkv", {}, "48"}, 6).compactions, model_->config.n_layers);
  run_and_check({"snapkv", {}, "48", KvType::BF16}, 3);
  run_and_check({"snapkv", {}, "48", KvType::F32}, 3);
}

TEST_F(DeviceKvMirrorTest, CakeScoreOrderedCascadingKeeps) {
  // Cascading: layers are cut again while later layers prefill, so more than one compaction each.
  EXPECT_GT(run_and_check({"cake", {}, "48"}, 6).compactions, model_->config.n_layers);
}

TEST_F(DeviceKvMirrorTest, H2OKeepsEveryDecodeStep) {
  EXPECT_GE(run_and_check({"h2o", {}, "48"}, 8).compactions, 8 * model_->config.n_layers);
}

TEST_F(DeviceKvMirrorTest, StreamingLLMReassignedPositions) {
  EXPECT_GE(run_and_check({"streamingllm", {}, "32"}, 8).head_resyncs, 8 * heads());
}

TEST_F(DeviceKvMirrorTest, D2OMergedEntries) {
  int64_t appended = 0;
  EXPECT_GT(run_and_check({"d2o", {}, "48"}, 6, &appended).rows_written, appended);  // merged rows re-sent
}

TEST_F(DeviceKvMirrorTest, ThinKZeroedKeyChannels) {
  int64_t appended = 0;
  EXPECT_GT(run_and_check({"think", {}, "48"}, 4, &appended).rows_written, appended);  // zeroed rows re-sent
}

TEST_F(DeviceKvMirrorTest, SpindleKVCodebookHeads) {
  int64_t appended = 0;
  const DeviceKvMirror::Counts n = run_and_check({"spindlekv", {}, "40%"}, 6, &appended);
  EXPECT_GE(n.head_resyncs, heads());     // every head became a codebook
  EXPECT_GT(n.rows_written, appended);    // decoded rows re-sent as reconstructions
}

// The eval runner's cycle: one prefill, a snapshot (a copy: not watched), then per run a restore
// (Decoder::restore, or a plain assignment: both assign the host cache, on_replaced), an eviction
// and decode steps.
TEST_F(DeviceKvMirrorTest, SnapshotRestoreCycle) {
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  DeviceKvTwin twin(geometry_of(decoder->cache()));
  DeviceKvBackendFor<DeviceKvTwin> backend(twin);
  DeviceKvMirror mirror(decoder->cache(), backend, MirrorAppends::Host);
  decoder->forward(std::span<const int>(tokens_));
  const auto snapshot = decoder->snapshot();
  EXPECT_EQ(snapshot->cache().listener(), nullptr);
  EXPECT_EQ(snapshot->position(), S());
  for (int run = 0; run < 4; ++run) {
    if (run % 2 == 0) {
      decoder->restore(*snapshot);
    } else {
      decoder->cache() = snapshot->cache();
      decoder->set_position(snapshot->position());
    }
    EXPECT_EQ(decoder->cache().listener(), &mirror);
    mirror.flush_all();
    ASSERT_TRUE(twin_equals_host(twin, decoder->cache())) << "run " << run << " restored";
    for (int h = 0; h < model_->config.n_kv_heads; ++h) {  // a hand eviction: every (run + 2)-th entry
      std::vector<int> keep;
      for (int t = decoder->cache().length(0, h) - 1; t >= 0; t -= run + 2) keep.push_back(t);  // descending
      decoder->cache().keep(0, h, keep);
    }
    for (int step = 0; step < 3; ++step) {
      const int token = 1 + step;
      decoder->forward(std::span<const int>(&token, 1));
      mirror.flush_all();
      ASSERT_TRUE(twin_equals_host(twin, decoder->cache())) << "run " << run << " step " << step;
    }
    EXPECT_EQ(decoder->position(), S() + 3);
  }
  decoder->reset();  // clear
  mirror.flush_all();
  EXPECT_TRUE(twin_equals_host(twin, decoder->cache()));
  EXPECT_EQ(twin.layout().bytes_in_use(), 0u);
  // A snapshot of another model's cache is refused.
  ModelConfig c = model_->config;
  c.n_layers += 1;
  const auto other_model = make_random_model(c, 3);
  auto other = make_cpu_decoder(*other_model, {.threads = 1});
  EXPECT_THROW(decoder->restore(*other->snapshot()), std::invalid_argument);
}

// Control: the same run without flushing leaves the twin behind, and the check says so.
TEST_F(DeviceKvMirrorTest, ControlUnflushedMirrorDiverges) {
  const auto policy = load_policy("snapkv", {});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  DeviceKvTwin twin(geometry_of(decoder->cache()));
  DeviceKvBackendFor<DeviceKvTwin> backend(twin);
  DeviceKvMirror mirror(decoder->cache(), backend, MirrorAppends::Host);
  EvictionEngine engine(*policy, model_->config, {Budget::parse("48"), 0});
  decoder->forward(std::span<const int>(tokens_), &engine);
  EXPECT_FALSE(twin_equals_host(twin, decoder->cache()));
  EXPECT_TRUE(mirror.pending(0));
  mirror.flush_all();
  EXPECT_TRUE(twin_equals_host(twin, decoder->cache()));
  // A mutation the listener does not report (a raw write into an F32 cache) is caught too.
  auto f32 = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  DeviceKvTwin twin32(geometry_of(f32->cache()));
  DeviceKvBackendFor<DeviceKvTwin> backend32(twin32);
  DeviceKvMirror mirror32(f32->cache(), backend32, MirrorAppends::Host);
  f32->forward(std::span<const int>(tokens_));
  mirror32.flush_all();
  ASSERT_TRUE(twin_equals_host(twin32, f32->cache()));
  f32->cache().mutable_keys(1, 0)[3] += 1.0f;
  mirror32.flush_all();
  EXPECT_FALSE(twin_equals_host(twin32, f32->cache()));
}


// MirrorAppends::Decoder as the CUDA decoder drives it: per layer flush, the block appended to the
// device first, then to the host, flush again; between blocks random keeps (ascending and in any
// order), written entries, re-assigned heads, clears and restores by assignment. The twin must
// equal the host after every block, in three KvTypes.
TEST(DeviceKvMirror, DecoderModeRandomOperations) {
  ModelConfig c;
  c.n_layers = 2, c.n_heads = 6, c.n_kv_heads = 3, c.head_dim = 8, c.dim = 48, c.hidden_dim = 8;
  c.vocab_size = 8, c.context_length = 4096;
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    KVCache cache(c, type);
    DeviceKvTwin twin(geometry_of(cache));
    DeviceKvBackendFor<DeviceKvTwin> backend(twin);
    DeviceKvMirror mirror(cache, backend, MirrorAppends::Decoder);
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    std::optional<KVCache> saved;
    int position = 0;
    for (int round = 0; round < 40; ++round) {
      const int n = 1 + static_cast<int>(rng() % 9);
      const int kv_dim = c.n_kv_heads * c.head_dim;
      const auto [k, v] = random_block(rng, n, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        mirror.flush(l);
        std::vector<int32_t> first;
        for (int h = 0; h < c.n_kv_heads; ++h) first.push_back(cache.next_position(l, h, position));
        twin.append(l, n, k.data(), v.data(), kv_dim, first);
        for (int h = 0; h < c.n_kv_heads; ++h)
          for (int i = 0; i < n; ++i) {
            const size_t at = static_cast<size_t>(i) * kv_dim + static_cast<size_t>(h) * c.head_dim;
            cache.append(l, h, first[h] + i, k.data() + at, v.data() + at);
          }
        mirror.flush(l);
      }
      ASSERT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type) << " round " << round;
      position += n;
      for (int l = 0; l < c.n_layers; ++l)  // the engine's turn: any mix of mutations, left pending
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const int len = cache.length(l, h);
          std::vector<int> keep(static_cast<size_t>(len));
          std::iota(keep.begin(), keep.end(), 0);
          std::shuffle(keep.begin(), keep.end(), rng);
          keep.resize(static_cast<size_t>(len) * 3 / 4);
          if (rng() % 2) std::sort(keep.begin(), keep.end());
          cache.keep(l, h, keep);
          if (!keep.empty() && rng() % 3 == 0) {
            std::vector<float> row(static_cast<size_t>(c.head_dim), normal(rng));
            cache.write_entry(l, h, static_cast<int>(rng() % keep.size()), row.data(), rng() % 2 ? row.data() : nullptr);
          }
          if (rng() % 3 == 0) cache.keep(l, h, std::vector<int>(keep.size() > 1 ? 1 : 0, 0));
        }
      if (round % 7 == 3) cache.reassign_positions(1, 2);
      if (round % 11 == 5) saved = cache;
      if (round % 11 == 9 && saved) cache = *saved;
      if (round == 30) cache.clear();
    }
  }
}

// A flush whose keeps leave a layer mostly empty gives the layer's room back on the device
// (DeviceKvBackend::release_room at the end of the flush's work), the other layer keeps its room;
// a clear gives everything back; a replacement with a full cache is written back at the rows'
// capacity and not given back again (the release comes after the resync), the twin equal to the
// host throughout.
TEST(DeviceKvMirror, AFlushThatEmptiesALayerGivesItsRoomBack) {
  const ModelConfig c = two_layer_config();
  DecoderModeRig rig(c, KvType::F16);
  std::mt19937 rng(5);
  const int rows = 600, kv_dim = c.n_kv_heads * c.head_dim;
  const auto [k, v] = random_block(rng, rows, kv_dim);
  for (int l = 0; l < c.n_layers; ++l) {
    rig.mirror.flush(l);
    append_block(rig.twin, rig.reference, &rig.cache, l, 0, k, v);
    rig.mirror.flush(l);
  }
  const KVCache full = rig.cache;
  const int64_t full_rows = rig.twin.layout().layer(1).capacity_rows();
  for (int h = 0; h < c.n_kv_heads; ++h) {
    std::vector<int> keep;
    for (int j = 0; j < 30; ++j) keep.push_back(j * 20 + h);
    rig.cache.keep(0, h, keep);
  }
  rig.mirror.flush_all();
  ASSERT_TRUE(twin_equals_host(rig.twin, rig.cache));
  EXPECT_EQ(rig.twin.layout().layer(0).capacity_rows(), c.n_kv_heads * 64);  // 1.5 x 30 -> 45 -> 64 per head
  EXPECT_EQ(rig.twin.layout().layer(1).capacity_rows(), full_rows);
  rig.cache.clear();
  rig.mirror.flush_all();
  EXPECT_EQ(rig.twin.layout().bytes_reserved(), 0u);
  rig.cache = full;
  rig.mirror.flush_all();
  ASSERT_TRUE(twin_equals_host(rig.twin, rig.cache));
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      EXPECT_EQ(rig.twin.layout().layer(l).heads[static_cast<size_t>(h)].capacity, 640) << "layer " << l;
}

// One layer, one KV head of head_dim 4: the smallest cache the contract tests need.
ModelConfig one_head_config() {
  ModelConfig c;
  c.n_layers = 1, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4, c.dim = 8, c.hidden_dim = 8;
  c.vocab_size = 8, c.context_length = 16;
  return c;
}

// A Decoder-mode mirror over a one_head_config cache and a twin.
struct OneHeadMirror {
  KVCache cache{one_head_config()};
  DeviceKvTwin twin{geometry_of(cache)};
  DeviceKvBackendFor<DeviceKvTwin> backend{twin};
  DeviceKvMirror mirror{cache, backend, MirrorAppends::Decoder};
};

// The decoder-appends contract: appending to a head whose keeps were not flushed is refused.
TEST(DeviceKvMirror, DecoderModeRefusesAnAppendBeforeTheFlush) {
  const ModelConfig c = one_head_config();
  OneHeadMirror m;
  const float k[4] = {1, 2, 3, 4};
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{0});
  m.cache.append(0, 0, 0, k, k);
  m.mirror.flush(0);
  EXPECT_TRUE(twin_equals_host(m.twin, m.cache));
  m.cache.keep(0, 0, std::vector<int>{});
  EXPECT_THROW(m.cache.append(0, 0, 1, k, k), std::logic_error);
  // Another geometry is refused at construction.
  KVCache other(c, KvType::BF16);
  EXPECT_THROW(DeviceKvMirror(other, m.backend, MirrorAppends::Host), std::invalid_argument);
}


// Deferred host appends (the CUDA decoder's calls without an observer): blocks go to the device
// only and the host cache lags until sync_host reads them back. A reference host cache takes every
// block directly; after each sync the mirrored host cache must hold exactly its words and
// positions, and the twin must equal both. Rounds with an observer (sync first, host append, then
// the engine's keeps and written entries) interleave with deferred rounds, in three KvTypes.
TEST(DeviceKvMirror, DeferredHostAppendsCatchUpOnSync) {
  const ModelConfig c = two_layer_config();
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    DecoderModeRig rig(c, type);
    KVCache &cache = rig.cache, &reference = rig.reference;
    DeviceKvTwin& twin = rig.twin;
    DeviceKvMirror& mirror = rig.mirror;
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    int position = 0, deferred_rounds = 0;
    for (int round = 0; round < 30; ++round) {
      // One call that reads the host cache, then two deferred ones: the host holds real rows, so
      // deferred rows lag (a host with no real row takes positions instead: the test below).
      const bool observer = round % 3 == 0;
      if (observer) mirror.sync_host();
      const int n = 1 + static_cast<int>(rng() % 5);
      const int kv_dim = c.n_kv_heads * c.head_dim;
      const auto [k, v] = random_block(rng, n, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        mirror.flush(l);
        append_block(twin, reference, observer ? &cache : nullptr, l, position, k, v);
        if (!observer) {
          ASSERT_TRUE(mirror.defer_host_append(l, n, position));
          EXPECT_GE(mirror.host_lag(l), n);
        }
        mirror.flush(l);
      }
      position += n;
      deferred_rounds += !observer;
      if (!observer) continue;
      ASSERT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type) << " round " << round;
      ASSERT_TRUE(twin_equals_host(twin, reference)) << kv_type_name(type) << " round " << round;
      for (int l = 0; l < c.n_layers; ++l)  // the engine's turn, on both host caches
        for (int h = 0; h < c.n_kv_heads; ++h) {
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (rng() % 4 != 0) keep.push_back(t);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
          if (!keep.empty()) {
            const std::vector<float> row(static_cast<size_t>(c.head_dim), normal(rng));
            const int t = static_cast<int>(rng() % keep.size());
            cache.write_entry(l, h, t, row.data(), row.data());
            reference.write_entry(l, h, t, row.data(), row.data());
          }
        }
    }
    mirror.sync_host();
    mirror.flush_all();
    EXPECT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type) << " at the end";
    EXPECT_TRUE(twin_equals_host(twin, reference)) << kv_type_name(type) << " at the end";
    EXPECT_EQ(mirror.counts().rows_read, mirror.counts().rows_deferred);
    EXPECT_GT(mirror.counts().rows_deferred, 0);
    EXPECT_GT(deferred_rounds, 0);
    // The host time of the read-backs and of the flushes that had work is measured (only its sign:
    // bench_gpu_decode reports it per decoded token).
    EXPECT_GT(mirror.seconds().sync_host, 0.0);
    EXPECT_GT(mirror.seconds().flush, 0.0);
  }
}

// Where the host must take the rows at once, defer_host_append declines (re-assigned positions:
// the next position is the host's length); clear() ends a lag. A host head with no real row takes
// positions instead of lagging.
// Released host rows (DeviceKvMirror::release_host_rows, for an observer that reads no row in the
// calls to come): after a prompt the host read and the engine's keeps, every head drops its rows
// (the host then reserves a fraction of the bytes), the decode steps that follow take positions
// (deferred and placeholder calls), more keeps follow, and a call that reads rows brings them back:
// the host then holds exactly the reference's words and positions, and the twin equals both. In
// three KvTypes; heads with placeholders or a lagging layer are not released.
TEST(DeviceKvMirror, ReleasedHostRowsComeBackWhenRead) {
  const ModelConfig c = two_layer_config();
  const int kv_dim = c.n_kv_heads * c.head_dim;
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    DecoderModeRig rig(c, type);
    KVCache &cache = rig.cache, &reference = rig.reference;
    std::mt19937 rng(31);
    const auto keep_some = [&](bool shuffled) {
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (rng() % 3 != 0) keep.push_back(t);
          if (shuffled) std::shuffle(keep.begin(), keep.end(), rng);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
        }
    };
    const auto [k, v] = random_block(rng, 24, kv_dim);
    for (int l = 0; l < c.n_layers; ++l) {
      rig.mirror.flush(l);
      append_block(rig.twin, reference, &cache, l, 0, k, v);
      rig.mirror.flush(l);
    }
    keep_some(/*shuffled=*/true);
    const size_t before = cache.bytes_reserved();
    EXPECT_EQ(rig.mirror.release_host_rows(), c.n_layers * c.n_kv_heads) << kv_type_name(type);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_TRUE(cache.rows_held_elsewhere(l, h));
    EXPECT_LT(cache.bytes_reserved(), before / 4) << kv_type_name(type);
    EXPECT_EQ(rig.mirror.release_host_rows(), 0) << "nothing left to release";
    int position = 24;
    for (int step = 0; step < 8; ++step, ++position) {
      const auto [k1, v1] = random_block(rng, 1, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        rig.mirror.flush(l);
        append_block(rig.twin, reference, nullptr, l, position, k1, v1);
        if (step % 2 == 0) {
          ASSERT_TRUE(rig.mirror.defer_host_append(l, 1, position));
        } else {
          ASSERT_TRUE(rig.mirror.append_placeholders(l, 1, position));
        }
        EXPECT_EQ(rig.mirror.host_lag(l), 0) << "a head holding no row takes positions";
        rig.mirror.flush(l);
      }
      if (step == 4) keep_some(/*shuffled=*/false);
    }
    rig.mirror.sync_host();
    ASSERT_TRUE(twin_equals_host(rig.twin, cache)) << kv_type_name(type);
    ASSERT_TRUE(twin_equals_host(rig.twin, reference)) << kv_type_name(type);
    // Placeholders on a head holding real rows, and a lagging layer, are not the device's copy.
    const auto [k2, v2] = random_block(rng, 1, kv_dim);
    rig.mirror.flush(0);
    append_block(rig.twin, reference, nullptr, 0, position, k2, v2);
    ASSERT_TRUE(rig.mirror.append_placeholders(0, 1, position));
    rig.mirror.flush(0);
    rig.mirror.flush(1);
    append_block(rig.twin, reference, nullptr, 1, position, k2, v2);
    ASSERT_TRUE(rig.mirror.defer_host_append(1, 1, position));
    rig.mirror.flush(1);
    EXPECT_EQ(rig.mirror.release_host_rows(), 0) << kv_type_name(type);
    rig.mirror.sync_host();
    ASSERT_TRUE(twin_equals_host(rig.twin, reference)) << kv_type_name(type);
  }
}

TEST(DeviceKvMirror, DeferralDeclinesAndClearEndsTheLag) {
  const ModelConfig c = one_head_config();
  OneHeadMirror m;
  const float k[4] = {1, 2, 3, 4};
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{0});
  ASSERT_TRUE(m.mirror.defer_host_append(0, 1, 0));  // an empty host head: positions only, no lag
  EXPECT_EQ(m.mirror.host_lag(0), 0);
  EXPECT_TRUE(m.cache.rows_held_elsewhere(0, 0));
  EXPECT_EQ(m.cache.positions(0, 0)[0], 0);
  m.mirror.sync_host();  // the head takes its row: from now on deferred rows lag
  EXPECT_FALSE(m.cache.rows_held_elsewhere(0, 0));
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{1});
  ASSERT_TRUE(m.mirror.defer_host_append(0, 1, 1));
  EXPECT_EQ(m.mirror.host_lag(0), 1);
  EXPECT_EQ(m.cache.length(0, 0), 1);
  // A mutation while the host lags is a bug of the caller (it skipped sync_host); the mirror
  // reports it (after the host cache changed: the listener hears of done mutations).
  EXPECT_THROW(m.cache.append(0, 0, 1, k, k), std::logic_error);
  EXPECT_THROW(m.cache.keep(0, 0, std::vector<int>{}), std::logic_error);
  m.cache.clear();  // the device head is emptied at the next flush; nothing lags any more
  EXPECT_EQ(m.mirror.host_lag(0), 0);
  m.mirror.flush(0);
  EXPECT_TRUE(twin_equals_host(m.twin, m.cache));
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{0});
  m.cache.append(0, 0, 0, k, k);
  m.mirror.flush(0);
  m.cache.reassign_positions(0, 0);
  m.mirror.flush(0);
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{1});
  EXPECT_FALSE(m.mirror.defer_host_append(0, 1, 1));  // re-assigned: the host appends now
  EXPECT_EQ(m.mirror.host_lag(0), 0);
  EXPECT_THROW(m.mirror.defer_host_append(1, 1, 0), std::invalid_argument);
  MirrorAppends host_mode = MirrorAppends::Host;
  KVCache other(c);
  DeviceKvTwin twin2(geometry_of(other));
  DeviceKvBackendFor<DeviceKvTwin> backend2(twin2);
  DeviceKvMirror host_mirror(other, backend2, host_mode);
  EXPECT_FALSE(host_mirror.defer_host_append(0, 1, 0));  // Host mode: the host appends itself
}

// Placeholder host rows (the CUDA decoder's observed one-token calls whose observer reads no cached
// row): blocks go to the device, the host takes zero rows with the right positions, the engine's
// keeps (score order: not ascending) number the same rows on both sides, and sync_host overwrites
// the placeholders with the device's words. A reference host cache takes every block directly and
// the same keeps; after each sync the mirrored host cache holds exactly its words and positions.
// Rounds mix placeholder calls, deferred calls (no observer) and calls with real rows and written
// entries, in three KvTypes.
TEST(DeviceKvMirror, PlaceholderRowsFollowKeepsAndAreFilledFromTheDevice) {
  const ModelConfig c = two_layer_config();
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    DecoderModeRig rig(c, type);
    KVCache &cache = rig.cache, &reference = rig.reference;
    DeviceKvTwin& twin = rig.twin;
    DeviceKvMirror& mirror = rig.mirror;
    std::mt19937 rng(23);
    std::normal_distribution<float> normal;
    int position = 0, placeholder_rounds = 0;
    for (int round = 0; round < 40; ++round) {
      enum { Placeholder, Deferred, Real } kind = round % 5 == 4 ? Real : round % 5 == 3 ? Deferred : Placeholder;
      if (kind == Real) mirror.sync_host();
      if (kind == Placeholder) mirror.sync_host_appends();
      const int n = kind == Placeholder ? 1 : 1 + static_cast<int>(rng() % 4);
      const int kv_dim = c.n_kv_heads * c.head_dim;
      const auto [k, v] = random_block(rng, n, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        mirror.flush(l);
        append_block(twin, reference, kind == Real ? &cache : nullptr, l, position, k, v);
        if (kind == Placeholder) {
          ASSERT_TRUE(mirror.append_placeholders(l, n, position));
        } else if (kind == Deferred) {
          ASSERT_TRUE(mirror.defer_host_append(l, n, position));
        }
        mirror.flush(l);
      }
      position += n;
      placeholder_rounds += kind == Placeholder;
      if (kind == Deferred) continue;
      for (int l = 0; l < c.n_layers; ++l)  // the engine's turn: keeps in a shuffled order
        for (int h = 0; h < c.n_kv_heads; ++h) {
          ASSERT_EQ(cache.length(l, h), reference.length(l, h));
          ASSERT_EQ(std::vector<int32_t>(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h)),
                    std::vector<int32_t>(reference.positions(l, h), reference.positions(l, h) + reference.length(l, h)));
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (rng() % 5 != 0) keep.push_back(t);
          std::shuffle(keep.begin(), keep.end(), rng);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
          if (kind == Real && !keep.empty()) {
            const std::vector<float> row(static_cast<size_t>(c.head_dim), normal(rng));
            const int t = static_cast<int>(rng() % keep.size());
            cache.write_entry(l, h, t, row.data(), row.data());
            reference.write_entry(l, h, t, row.data(), row.data());
          }
        }
      if (kind != Real) continue;
      mirror.flush_all();
      ASSERT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type) << " round " << round;
      ASSERT_TRUE(twin_equals_host(twin, reference)) << kv_type_name(type) << " round " << round;
    }
    mirror.sync_host();
    mirror.flush_all();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_TRUE(mirror.placeholder_rows(l, h).empty());
    EXPECT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type) << " at the end";
    EXPECT_TRUE(twin_equals_host(twin, reference)) << kv_type_name(type) << " at the end";
    EXPECT_GT(mirror.counts().rows_placeholder, 0);
    EXPECT_GT(placeholder_rounds, 0);
  }
}

// A host cache that never took a real row (the CUDA decoder's prompt and decode calls whose
// observer reads no cached row): its heads hold positions only (KVCache::append_position), so the
// host keeps 4 bytes per entry; keeps in score order follow; every row read is refused until
// sync_host hands each head its rows in one read, which then equal a reference that took every
// block. A restore (a copy of the position-only host cache, then mark_synced) makes every row a
// placeholder again.
TEST(DeviceKvMirror, PositionOnlyHostHeadsHoldNoRowsUntilSynced) {
  const ModelConfig c = two_layer_config();
  for (KvType type : {KvType::F16, KvType::F32}) {
    DecoderModeRig rig(c, type);
    KVCache &cache = rig.cache, &reference = rig.reference;
    DeviceKvTwin& twin = rig.twin;
    DeviceKvMirror& mirror = rig.mirror;
    std::mt19937 rng(5);
    const int kv_dim = c.n_kv_heads * c.head_dim;
    int position = 0;
    std::unique_ptr<KVCache> saved;
    for (int round = 0; round < 12; ++round) {
      const int n = round == 0 ? 40 : 1;  // a prompt, then decode steps
      const auto [k, v] = random_block(rng, n, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        mirror.flush(l);
        append_block(twin, reference, nullptr, l, position, k, v);
        ASSERT_TRUE(mirror.append_placeholders(l, n, position));
        mirror.flush(l);
      }
      position += n;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          ASSERT_TRUE(cache.rows_held_elsewhere(l, h));
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (rng() % 6 != 0) keep.push_back(t);
          std::shuffle(keep.begin(), keep.end(), rng);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
          ASSERT_EQ(std::vector<int32_t>(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h)),
                    std::vector<int32_t>(reference.positions(l, h), reference.positions(l, h) + reference.length(l, h)));
        }
      if (round == 5) saved = std::make_unique<KVCache>(cache);  // a snapshot of the host half
    }
    EXPECT_LT(cache.bytes_reserved(), reference.bytes_reserved() / 4) << kv_type_name(type);
    EXPECT_EQ(cache.bytes_in_use(), reference.bytes_in_use());  // the cache it describes holds the rows
    std::vector<float> row(static_cast<size_t>(c.head_dim));
    EXPECT_THROW(cache.reconstruct_keys(1, 1, 0, 1, row.data()), std::logic_error);
    mirror.sync_host();
    mirror.flush_all();
    EXPECT_EQ(mirror.counts().rows_read, cache.total_entries());  // each row read once, at the end
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        EXPECT_FALSE(cache.rows_held_elsewhere(l, h));
        EXPECT_TRUE(mirror.placeholder_rows(l, h).empty());
      }
    EXPECT_TRUE(twin_equals_host(twin, cache)) << kv_type_name(type);
    EXPECT_TRUE(twin_equals_host(twin, reference)) << kv_type_name(type);
    // The bookkeeping of a restore: the host half assigned from a position-only copy, then
    // mark_synced (the decoder restores the device half device-to-device; not modelled here): the
    // heads are position-only again and the mirror says the layer has placeholders.
    cache = *saved;
    mirror.mark_synced();
    for (int l = 0; l < c.n_layers; ++l) {
      EXPECT_TRUE(mirror.has_placeholders(l));
      for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_TRUE(cache.rows_held_elsewhere(l, h));
    }
  }
}

// The norms of a reference cache's rows, head (l, h), as the engine computes them from rows.
std::vector<RowNorms> norms_from_rows(const KVCache& cache, int l, int h) {
  const int T = cache.length(l, h), d = cache.head_dim();
  std::vector<float> scratch, keys(static_cast<size_t>(T)), values(static_cast<size_t>(T));
  compute_row_norms(cache.keys_or_reconstruct(l, h, scratch), T, d, keys.data());
  compute_row_norms(cache.values_or_reconstruct(l, h, scratch), T, d, values.data());
  std::vector<RowNorms> out(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) out[static_cast<size_t>(t)] = {keys[static_cast<size_t>(t)], values[static_cast<size_t>(t)]};
  return out;
}

void expect_norms_of_reference(const KVCache& cache, const KVCache& reference, const std::string& what) {
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      if (cache.length(l, h) == 0) continue;
      ASSERT_TRUE(cache.holds_row_norms(l, h)) << what << " layer " << l << " head " << h;
      const std::span<const RowNorms> held = cache.held_row_norms(l, h);
      const std::vector<RowNorms> expect = norms_from_rows(reference, l, h);
      ASSERT_EQ(held.size(), expect.size()) << what;
      for (size_t t = 0; t < expect.size(); ++t) {
        // The same words, the same function (row_norms.h): the same bits.
        EXPECT_EQ(held[t].key, expect[t].key) << what << " layer " << l << " head " << h << " row " << t;
        EXPECT_EQ(held[t].value, expect[t].value) << what << " layer " << l << " head " << h << " row " << t;
      }
    }
}

// Row norms with position-only host heads (hold_row_norms: an observer reads key_norm or
// value_norm): a prompt and decode steps as placeholders with score-order keeps, then deferred
// blocks: every position-only head holds the norms a reference host cache that took every row
// computes from its rows, bit for bit, in three KvTypes. Heads that were position-only before the
// norms were asked for are given them at once; a call that does not ask drops them (no read), and
// asking again gives them back. The device's twin computes them with the kernel's body.
// With norms held, a layer holding real rows takes real rows instead of zero placeholders.
TEST(DeviceKvMirror, PositionOnlyHeadsHoldTheNormsOfTheirDeviceRows) {
  const ModelConfig c = two_layer_config();
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    const std::string what = kv_type_name(type);
    DecoderModeRig rig(c, type);
    KVCache &cache = rig.cache, &reference = rig.reference;
    DeviceKvTwin& twin = rig.twin;
    DeviceKvMirror& mirror = rig.mirror;
    std::mt19937 rng(17);
    const int kv_dim = c.n_kv_heads * c.head_dim;
    int position = 0;
    for (int round = 0; round < 16; ++round) {
      if (round == 13) mirror.hold_row_norms(false);  // a call no one reads norms in: no norm is read
      if (round == 14) {  // asked again: the heads that dropped theirs get them at once
        mirror.hold_row_norms(true);
        expect_norms_of_reference(cache, reference, what + " after asking again");
      }
      if (round == 3) {  // the norms are asked for only now: the heads so far get them at once
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_FALSE(cache.holds_row_norms(l, h));
        mirror.hold_row_norms(true);
        ASSERT_TRUE(mirror.holds_row_norms());
        expect_norms_of_reference(cache, reference, what + " after hold_row_norms");
      }
      const int n = round == 0 ? 40 : 1;  // a prompt, then decode steps (deferred from round 9)
      const auto [k, v] = random_block(rng, n, kv_dim);
      for (int l = 0; l < c.n_layers; ++l) {
        mirror.flush(l);
        append_block(twin, reference, nullptr, l, position, k, v);
        if (round < 9) {
          ASSERT_TRUE(mirror.append_placeholders(l, n, position));
        } else {
          ASSERT_TRUE(mirror.defer_host_append(l, n, position));
          EXPECT_EQ(mirror.host_lag(l), 0) << "position-only heads take positions (and norms), not lag";
        }
        mirror.flush(l);
      }
      position += n;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (rng() % 5 != 0) keep.push_back(t);
          std::shuffle(keep.begin(), keep.end(), rng);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
        }
      if (round == 13) {
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_FALSE(cache.holds_row_norms(l, h)) << what;
      } else if (round >= 3) {
        expect_norms_of_reference(cache, reference, what + " round " + std::to_string(round));
      }
    }
    // The twin's kernel body against the rows it holds, directly (and a range outside a head refused).
    mirror.flush_all();  // the last keeps
    const std::vector<int64_t> first = {1, 0}, count = {2, 3};
    const std::vector<RowNorms> direct = twin.row_norms(1, first, count);
    ASSERT_EQ(direct.size(), 5u);
    const std::vector<RowNorms> h0 = norms_from_rows(reference, 1, 0), h1 = norms_from_rows(reference, 1, 1);
    EXPECT_EQ(direct[0].key, h0[1].key);
    EXPECT_EQ(direct[1].value, h0[2].value);
    EXPECT_EQ(direct[2].key, h1[0].key);
    EXPECT_EQ(direct[4].value, h1[2].value);
    const std::vector<int64_t> too_far = {0, reference.length(1, 1)}, one = {0, 1};
    EXPECT_THROW(twin.row_norms(1, too_far, one), std::out_of_range);
    // Syncing gives the heads their rows, and drops the norms (computed from the rows from then on).
    mirror.sync_host();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) EXPECT_FALSE(cache.holds_row_norms(l, h)) << what;
    EXPECT_TRUE(twin_equals_host(twin, reference)) << what;
    // A layer whose heads hold real rows (after the sync) takes real rows: zero placeholders would
    // give wrong norms.
    const auto [k, v] = random_block(rng, 1, kv_dim);
    mirror.flush(0);
    append_block(twin, reference, nullptr, 0, position, k, v);
    EXPECT_FALSE(mirror.append_placeholders(0, 1, position)) << what;
  }
}

// Re-assigned positions (StreamingLLM's reassign_in_cache) with position-only host heads: the host
// only re-numbers, and the mirror re-assigns on the device (its keys rotated with the host cache's
// RoPE table, device_kv_reassign.h). A reference host cache that holds every row re-rotates its own
// keys; after every round the twin holds exactly its words and positions, in three KvTypes and both
// pairing conventions. The rounds follow the engine's keep-then-re-assign, and also a keep after a
// pending re-assignment (they do not compose: the mirror applies the pending one first) and two
// re-assignments in a row. New tokens continue at the cache length on both sides.
TEST(DeviceKvMirror, ReassignedPositionsOfPositionOnlyHeadsAreRotatedOnTheDevice) {
  for (RopeStyle style : {RopeStyle::AdjacentPairs, RopeStyle::HalfSplit}) {
    ModelConfig c = two_layer_config();
    c.rope_style = style;
    for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
      const std::string what = std::string(kv_type_name(type)) + (style == RopeStyle::HalfSplit ? " half-split" : "");
      DecoderModeRig rig(c, type);
      KVCache &cache = rig.cache, &reference = rig.reference;
      std::mt19937 rng(23);
      const int kv_dim = c.n_kv_heads * c.head_dim;
      int absolute = 0;
      for (int round = 0; round < 12; ++round) {
        const int n = round == 0 ? 40 : 1;
        const auto [k, v] = random_block(rng, n, kv_dim);
        for (int l = 0; l < c.n_layers; ++l) {
          rig.mirror.flush(l);
          const int position = cache.next_position(l, 0, absolute);
          ASSERT_EQ(position, reference.next_position(l, 0, absolute)) << what;
          append_block(rig.twin, reference, nullptr, l, position, k, v);
          ASSERT_TRUE(rig.mirror.append_placeholders(l, n, position)) << what << " round " << round;
          rig.mirror.flush(l);
        }
        absolute += n;
        const auto keep_some = [&](int l, int h) {
          std::vector<int> keep;
          for (int t = 0; t < cache.length(l, h); ++t)
            if (t < 2 || rng() % 4 != 0) keep.push_back(t);  // the sinks, and most of the rest
          std::shuffle(keep.begin() + std::min<size_t>(2, keep.size()), keep.end(), rng);
          cache.keep(l, h, keep);
          reference.keep(l, h, keep);
        };
        const auto reassign = [&](int l, int h) {
          cache.reassign_positions(l, h);
          reference.reassign_positions(l, h);
        };
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h) {
            keep_some(l, h);
            reassign(l, h);
            if (round % 3 == 1 && h == 0) {  // keep after a pending re-assignment, then again
              keep_some(l, h);
              reassign(l, h);
            }
            if (round % 3 == 2 && h == 1) reassign(l, h);  // twice in a row (the second an identity)
            ASSERT_TRUE(cache.rows_held_elsewhere(l, h)) << what;
          }
        rig.mirror.flush_all();
        ASSERT_TRUE(twin_equals_host(rig.twin, reference)) << what << " round " << round;
      }
      EXPECT_GT(rig.mirror.counts().device_reassigns, 0) << what;
      EXPECT_EQ(rig.mirror.counts().head_resyncs, 0) << what << ": no head went through the host";
      EXPECT_EQ(rig.mirror.counts().rows_read, 0) << what;
    }
  }
}

// The twin's re-assignment against the host's on the same rows, including a table that does not
// reach an old position (refused, nothing changed on that entry's side of the contract).
TEST(DeviceKvMirror, TheTwinsReassignmentIsTheHostCachesAndRefusesAShortTable) {
  const ModelConfig c = two_layer_config();
  DecoderModeRig rig(c, KvType::F16);
  std::mt19937 rng(29);
  const auto [k, v] = random_block(rng, 30, c.n_kv_heads * c.head_dim);
  append_block(rig.twin, rig.reference, nullptr, 1, 500, k, v);  // positions 500.. 529
  KVCache short_table(c, KvType::F16);
  for (int t = 0; t < 30; ++t) short_table.append_position(0, 0, t);  // a table for 30 positions only
  short_table.reassign_positions(0, 0);
  const std::vector<char> head0 = {1, 0};
  EXPECT_THROW(rig.twin.reassign_positions(1, head0, short_table.rope_table()), std::logic_error);
  const std::vector<char> three = {1, 0, 1};
  EXPECT_THROW(rig.twin.reassign_positions(1, three, rig.reference.rope_table()), std::invalid_argument);
}

// sync_host_for_copy (the decoder's snapshot): a layer whose head 0 holds real rows and whose head 1
// was emptied by a keep takes zero placeholders on head 0 and positions only on head 1; a deferred
// block then lags (head 0 holds real rows), and head 1 takes the lagging rows as positions too.
// The copy's sync fills head 0 (placeholders and lag) and leaves head 1 position-only; sync_host
// then gives head 1 its rows, and both equal the device and a reference that took every block.
TEST(DeviceKvMirror, SyncForCopyLeavesPositionOnlyHeadsOnTheDevice) {
  const ModelConfig c = two_layer_config();
  DecoderModeRig rig(c, KvType::F16);
  KVCache &cache = rig.cache, &reference = rig.reference;
  DeviceKvTwin& twin = rig.twin;
  DeviceKvMirror& mirror = rig.mirror;
  std::mt19937 rng(9);
  const int kv_dim = c.n_kv_heads * c.head_dim;
  int position = 0;
  auto block = [&](int n, int kind) {  // 0: real rows, 1: placeholders, 2: deferred
    const auto [k, v] = random_block(rng, n, kv_dim);
    for (int l = 0; l < c.n_layers; ++l) {
      mirror.flush(l);
      append_block(twin, reference, kind == 0 ? &cache : nullptr, l, position, k, v);
      if (kind == 1) {
        ASSERT_TRUE(mirror.append_placeholders(l, n, position));
      } else if (kind == 2) {
        ASSERT_TRUE(mirror.defer_host_append(l, n, position));
      }
      mirror.flush(l);
    }
    position += n;
  };
  block(6, 0);
  for (int l = 0; l < c.n_layers; ++l) {
    cache.keep(l, 1, std::vector<int>{});
    reference.keep(l, 1, std::vector<int>{});
  }
  block(3, 1);
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_FALSE(cache.rows_held_elsewhere(l, 0));
    EXPECT_TRUE(cache.rows_held_elsewhere(l, 1));
  }
  block(2, 2);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(mirror.host_lag(l), 2);
  mirror.sync_host_for_copy();
  for (int l = 0; l < c.n_layers; ++l) {
    EXPECT_EQ(mirror.host_lag(l), 0);
    EXPECT_TRUE(mirror.placeholder_rows(l, 0).empty());
    EXPECT_TRUE(mirror.placeholder_rows(l, 1).empty());  // position-only: no list needed
    EXPECT_TRUE(cache.rows_held_elsewhere(l, 1));
    EXPECT_EQ(cache.length(l, 1), 5);
    for (int h = 0; h < c.n_kv_heads; ++h)
      EXPECT_EQ(std::vector<int32_t>(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h)),
                std::vector<int32_t>(reference.positions(l, h), reference.positions(l, h) + reference.length(l, h)));
    std::vector<float> a(static_cast<size_t>(cache.length(l, 0)) * c.head_dim), b(a.size());
    cache.reconstruct_keys(l, 0, 0, cache.length(l, 0), a.data());
    reference.reconstruct_keys(l, 0, 0, reference.length(l, 0), b.data());
    EXPECT_EQ(a, b) << "layer " << l;
  }
  mirror.sync_host();
  mirror.flush_all();
  EXPECT_TRUE(twin_equals_host(twin, cache));
  EXPECT_TRUE(twin_equals_host(twin, reference));
}

// Control: before sync_host the mirrored host cache holds zeros where the reference holds the
// block (so the equality above rests on the fill), and a written entry, re-assigned positions or
// an unfold on a head with placeholders are refused; placeholders decline where deferral does and
// while the layer lags; clear() drops them.
TEST(DeviceKvMirror, PlaceholdersAreZerosUntilFilledAndRefuseRowEdits) {
  OneHeadMirror m;
  const float k[4] = {1, 2, 3, 4}, zero[4] = {0, 0, 0, 0};
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{0});
  m.cache.append(0, 0, 0, k, k);
  m.mirror.flush(0);
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{1});
  ASSERT_TRUE(m.mirror.append_placeholders(0, 1, 1));
  EXPECT_EQ(m.cache.length(0, 0), 2);
  EXPECT_EQ(m.cache.positions(0, 0)[1], 1);
  const auto key_row = [&](int t) {
    std::vector<float> row(4);
    m.cache.reconstruct_keys(0, 0, t, t + 1, row.data());
    return row;
  };
  EXPECT_EQ(key_row(1), std::vector<float>(zero, zero + 4));
  EXPECT_EQ(m.mirror.placeholder_rows(0, 0), std::vector<int>{1});
  EXPECT_THROW(m.cache.write_entry(0, 0, 0, k, k), std::logic_error);
  m.cache.keep(0, 0, std::vector<int>{1, 0});  // score order: the placeholder moves to row 0
  EXPECT_EQ(m.mirror.placeholder_rows(0, 0), std::vector<int>{0});
  m.mirror.sync_host();
  EXPECT_TRUE(m.mirror.placeholder_rows(0, 0).empty());
  EXPECT_EQ(key_row(0), std::vector<float>(k, k + 4));
  m.mirror.flush(0);
  EXPECT_TRUE(twin_equals_host(m.twin, m.cache));
  // Declines: a lagging layer, and a bad layer is an error.
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{2});
  ASSERT_TRUE(m.mirror.defer_host_append(0, 1, 2));
  EXPECT_FALSE(m.mirror.append_placeholders(0, 1, 3));
  EXPECT_THROW(m.mirror.append_placeholders(1, 1, 3), std::invalid_argument);
  m.mirror.sync_host_appends();
  m.twin.append(0, 1, k, k, 4, std::vector<int32_t>{3});
  ASSERT_TRUE(m.mirror.append_placeholders(0, 1, 3));
  // (The listener hears of a mutation once it is done: the refused re-assignment did happen.)
  EXPECT_THROW(m.cache.reassign_positions(0, 0), std::logic_error);
  m.cache.clear();
  EXPECT_TRUE(m.mirror.placeholder_rows(0, 0).empty());
}

}  // namespace
}  // namespace kvevict
