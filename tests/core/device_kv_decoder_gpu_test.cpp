// The CUDA decoder on its device-resident KV cache (DeviceKvMode::Resident, the default) - GPU
// only; skipped with the reason when the build has no CUDA or no usable device. First run on an
// H200 on 2026-12-04 (docs/CUDA.md).
//  - against the CPU decoder under eviction (snapkv: ascending keeps; cake: score-ordered keeps
//    and cascading eviction during the prefill; h2o: decode-time eviction) and a decode run, in
//    lockstep with the tolerance of cuda_decoder_test.cpp (lockstep_eviction.h): exact kept sets
//    were too strict, the first H200 run parted CAKE's caches on rounding-level score ties;
//  - the device cache against the host cache after eviction and decode, word for word
//    (read_head vs the host's stored words and positions), and after a snapshot/restore cycle;
//  - against the reference packed-upload path (DeviceKvMode::PackedUpload): both read the same
//    KvType words converted to f32 the same way, so the logits agree to rounding noise.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/cache_row_reads.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "device_kv_decoder_gpu_check.h"
#include "device_kv_gpu_test_util.h"
#include "lockstep_eviction.h"
#include "dsl/policy_loader.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/device_kv_cache.h"
#endif

namespace kvevict {
namespace {

using test::logit_bound;
using test::max_abs_diff;

ModelConfig gqa_config() { return test::gqa_test_config("device-kv-test"); }

std::vector<int> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(static_cast<size_t>(n));
  for (int& v : t) v = int(rng() % 300);
  return t;
}

int argmax(const std::vector<float>& v) { return int(std::max_element(v.begin(), v.end()) - v.begin()); }

// Prefill under the policy, then `steps` decode steps on the CPU's greedy tokens, in lockstep
// (lockstep_eviction.h): the logits within the bound while the caches are the same, and the caches
// the same (kept sets and slot order) until they part, which they may only on near ties.
void compare_under_policy(const std::string& name, const std::string& budget, int steps) {
  const auto model = make_random_model(gqa_config(), 21);
  const auto policy = load_policy(name, {});
  auto cpu = make_decoder(*model, DecoderDevice::Cpu, {.threads = 1});
  auto gpu = make_decoder(*model, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
  EngineOptions options{Budget::parse(budget), 0};
  options.trace_selection = true;
  EvictionEngine cpu_engine(*policy, model->config, options);
  EvictionEngine gpu_engine(*policy, model->config, options);
  const auto outcome = test::eviction_in_lockstep(*cpu, cpu_engine, *gpu, gpu_engine, random_prompt(160, 5), steps,
                                                  logit_bound);
  EXPECT_TRUE(outcome) << name;
  std::printf("%s: %s\n", name.c_str(), outcome.message());
}

TEST(DeviceKvDecoderGpu, ResidentSnapKVMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  compare_under_policy("snapkv", "64", 12);
}

TEST(DeviceKvDecoderGpu, ResidentCakeMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  compare_under_policy("cake", "64", 12);
}

TEST(DeviceKvDecoderGpu, ResidentH2ODecodeEvictionMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  compare_under_policy("h2o", "64", 16);
}

// The prompt query statistics made on the device (query_statistics.h) against the CPU decoder's
// host rule, through the policies that read them (Q_mean and Q_cov; Q_mean alone).
TEST(DeviceKvDecoderGpu, ResidentExpectedAttentionAndCapMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  compare_under_policy("expected_attention", "64", 4);
  compare_under_policy("cap", "64", 4);
}


TEST(DeviceKvDecoderGpu, DeviceCacheEqualsTheHostCacheAfterEvictionAndRestore) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 23);
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    auto gpu = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
    const std::vector<int> prompt = random_prompt(150, 7);
    gpu->forward(prompt);
    const auto snapshot = gpu->snapshot();
    for (const char* name : {"snapkv", "cake", "h2o"}) {
      gpu->restore(*snapshot);
      ASSERT_TRUE(device_equals_host(*gpu)) << name << " restored";
      // Evict as an eval run does: a fresh prefill under the policy, then decode steps.
      gpu->reset();
      const auto policy = load_policy(name, {});
      EvictionEngine engine(*policy, model->config, {Budget::parse("48"), 0});
      std::vector<float> logits = gpu->forward(prompt, &engine);
      ASSERT_TRUE(device_equals_host(*gpu)) << name << " after the prefill, " << kv_type_name(type);
      for (int s = 0; s < 6; ++s) {
        logits = gpu->forward(std::vector<int>{argmax(logits)}, &engine);
        ASSERT_TRUE(device_equals_host(*gpu)) << name << " step " << s << ", " << kv_type_name(type);
      }
    }
  }
#endif
}

// Calls without an observer append to the device only (DeviceKvMirror::defer_host_append) and
// the host cache catches up when asked for. A decoder decoding so must give the same logits as one
// whose every call has an observer (which keeps the host cache appended), and, once asked, the
// same host cache word for word, equal to its device cache; in three KvTypes, after an eviction.
TEST(DeviceKvDecoderGpu, DeferredHostAppendsGiveTheSameCacheAndLogits) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  WatchOnly watch;
  const auto model = make_random_model(gqa_config(), 31);
  for (KvType type : {KvType::F16, KvType::BF16, KvType::F32}) {
    auto deferred = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
    auto appended = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
    const std::vector<int> prompt = random_prompt(120, 9);
    const auto policy = load_policy("snapkv", {});
    EvictionEngine e1(*policy, model->config, {Budget::parse("40"), 0}), e2(*policy, model->config, {Budget::parse("40"), 0});
    std::vector<float> a = deferred->forward(prompt, &e1), b = appended->forward(prompt, &e2);
    for (int s = 0; s < 12; ++s) {
      ASSERT_EQ(a, b) << "step " << s << ", " << kv_type_name(type);
      const int next = argmax(a);
      a = deferred->forward(std::vector<int>{next});
      b = appended->forward(std::vector<int>{next}, &watch);
    }
    ASSERT_TRUE(device_equals_host(*deferred)) << kv_type_name(type);  // cache(): the host catches up
    ASSERT_TRUE(device_equals_host(*appended)) << kv_type_name(type);
    const KVCache &x = deferred->cache(), &y = appended->cache();
    for (int l = 0; l < x.n_layers(); ++l)
      for (int h = 0; h < x.n_kv_heads(); ++h) {
        ASSERT_EQ(x.length(l, h), y.length(l, h));
        EXPECT_TRUE(std::equal(x.positions(l, h), x.positions(l, h) + x.length(l, h), y.positions(l, h)));
      }
  }
#endif
}

#if defined(KVEVICT_HAVE_CUDA)
// The engine, but declaring that it reads cached rows in every kind of call: the decoder then gives
// the host cache every row (the reference of the placeholder and position-only tests below).
struct ReadsRows : ForwardObserver {
  EvictionEngine& engine;
  explicit ReadsRows(EvictionEngine& e) : engine(e) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine.request();
    r.cache_row_reads = CacheRowReadsByCall{};  // Reads for every kind of call
    r.host_rows_not_read_later = false;          // and keeps them
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache& c) override { engine.after_layer(s, c); }
  void after_forward(int n, KVCache& c) override { engine.after_forward(n, c); }
};

// Whether some (layer, KV head) of `cache` holds fewer than n entries (something was evicted).
bool some_head_shorter_than(const KVCache& cache, int n) {
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      if (cache.length(l, h) < n) return true;
  return false;
}

// Two CUDA decoders running `policy` (budget 40): `rowless` observed by its engine as it is (its
// host cache may hold positions only), `real` through ReadsRows (its host takes every row). The
// prompt, then `steps` greedy decode steps on both: the logits of every call equal; afterwards the
// rowless device cache equals its host cache once synced, and both hold the same lengths and
// positions. The decoders are left for the caller's own checks; `after_prompt`, when given, sees
// them right after the prompt (before anything brings rows to the host).
struct RowlessAgainstReal {
  std::unique_ptr<Decoder> rowless, real;
};
void run_rowless_against_real(const Model& model, const PolicyProgram& policy, KvType type,
                              const std::vector<int>& prompt, int steps, const std::string& what,
                              RowlessAgainstReal& out,
                              const std::function<void(Decoder& rowless, Decoder& real)>& after_prompt = {}) {
  out.rowless = make_decoder(model, DecoderDevice::Cuda, {.kv_type = type});
  out.real = make_decoder(model, DecoderDevice::Cuda, {.kv_type = type});
  EvictionEngine e1(policy, model.config, {Budget::parse("40"), 0}), e2(policy, model.config, {Budget::parse("40"), 0});
  ReadsRows reads(e2);
  std::vector<float> a = prefill_prompt(*out.rowless, prompt, &e1, &e1), b = prefill_prompt(*out.real, prompt, &e2, &reads);
  if (after_prompt) after_prompt(*out.rowless, *out.real);
  for (int s = 0; s < steps; ++s) {
    ASSERT_EQ(a, b) << what << ", call " << s;
    const int next = argmax(a);
    a = out.rowless->forward(std::vector<int>{next}, &e1);
    b = out.real->forward(std::vector<int>{next}, &reads);
  }
  ASSERT_EQ(a, b) << what;
  ASSERT_TRUE(device_equals_host(*out.rowless)) << what;
  const KVCache &x = out.rowless->cache(), &y = out.real->cache();
  for (int l = 0; l < x.n_layers(); ++l)
    for (int h = 0; h < x.n_kv_heads(); ++h) {
      ASSERT_EQ(x.length(l, h), y.length(l, h)) << what;
      EXPECT_TRUE(std::equal(x.positions(l, h), x.positions(l, h) + x.length(l, h), y.positions(l, h))) << what;
    }
}
#endif

// Placeholder host rows (DeviceKvMirror::append_placeholders): H2O's one-token decode steps read no
// cached row (cache_row_reads.h), so its host cache takes placeholders and no key or value
// leaves the device. It must keep the same caches and logits as a run whose observer says it reads
// rows (real host appends), and once asked its host cache equals its device cache.
TEST(DeviceKvDecoderGpu, PlaceholderHostRowsGiveTheSameCacheAndLogits) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 41);
  const auto policy = load_policy("h2o", {});
  for (KvType type : {KvType::F16, KvType::F32}) {
    auto placeholder = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
    auto real = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
    EvictionEngine e1(*policy, model->config, {Budget::parse("40"), 0}), e2(*policy, model->config, {Budget::parse("40"), 0});
    ReadsRows reads(e2);
    const std::vector<int> prompt = random_prompt(120, 5);
    std::vector<float> a = placeholder->forward(prompt, &e1), b = real->forward(prompt, &reads);
    for (int s = 0; s < 12; ++s) {
      ASSERT_EQ(a, b) << "step " << s << ", " << kv_type_name(type);
      const int next = argmax(a);
      a = placeholder->forward(std::vector<int>{next}, &e1);
      b = real->forward(std::vector<int>{next}, &reads);
    }
    EXPECT_GT(placeholder->device_kv_stats().counts.rows_placeholder, 0) << kv_type_name(type);
    EXPECT_EQ(real->device_kv_stats().counts.rows_placeholder, 0) << kv_type_name(type);
    ASSERT_TRUE(device_equals_host(*placeholder)) << kv_type_name(type);  // cache(): placeholders filled
    ASSERT_TRUE(device_equals_host(*real)) << kv_type_name(type);
    const KVCache &x = placeholder->cache(), &y = real->cache();
    for (int l = 0; l < x.n_layers(); ++l)
      for (int h = 0; h < x.n_kv_heads(); ++h) {
        ASSERT_EQ(x.length(l, h), y.length(l, h));
        EXPECT_TRUE(std::equal(x.positions(l, h), x.positions(l, h) + x.length(l, h), y.positions(l, h)));
      }
  }
  // CAKE and TOVA read A_now: with placeholder rows it is the decoder's one-token column sums, with
  // real rows the host's product of the newest query and the cached keys. The caches may part, on
  // near ties only; the logits agree while the caches do.
  for (const char* name : {"cake", "tova"}) {
    const auto p = load_policy(name, {});
    EngineOptions options{Budget::parse("40"), 0};
    options.trace_selection = true;
    auto placeholder = make_decoder(*model, DecoderDevice::Cuda, {});
    auto real = make_decoder(*model, DecoderDevice::Cuda, {});
    EvictionEngine e1(*p, model->config, options), e2(*p, model->config, options);
    ReadsRows reads(e2);
    test::LockstepOutcome outcome;
    EXPECT_TRUE(test::eviction_in_lockstep(*placeholder, e1, *real, e2, random_prompt(120, 6), 48,
                                           logit_bound,
                                           &outcome, &reads))
        << name;
    EXPECT_GT(placeholder->device_kv_stats().counts.rows_placeholder, 0) << name;
    ASSERT_TRUE(device_equals_host(*placeholder)) << name;
  }
#endif
}

// Placeholder host rows at the PROMPT (cache_row_reads.h): SnapKV, CAKE (cascading too), TOVA read
// only the window attention there, which the decoder computes on the device and hands over
// (NoneGivenDecoderSignals); so does NACL, whose window (found from the prompt's length) and
// non-causal proxy attention the decoder learns before the call because prefill_prompt announces
// the prompt; ChunkPress and NonCausalAttnPress read the segment-local attention A_seg, which the
// decoder makes on the device in the prompt's call (segment_attention_gpu_test.cpp holds the runner
// to its twin); H2O reads the column sums (None); a window policy prefilled in blocks
// declares it for every block of at least its window. Against a run whose observer says it reads
// rows at the prompt (the decode steps declare the same in both), the logits of every call and the
// host-visible caches (after sync) are identical, the prompt downloads no row (no host_append
// time, rows_placeholder > 0), and once asked the host cache equals the device cache.
TEST(DeviceKvDecoderGpu, PromptPlaceholderHostRowsGiveTheSameCacheAndLogits) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  struct ReadsPromptRows : ForwardObserver {  // the engine, but declaring it reads rows at the prompt
    EvictionEngine& engine;
    explicit ReadsPromptRows(EvictionEngine& e) : engine(e) {}
    ObservationRequest request() const override {
      ObservationRequest r = engine.request();
      // Every block of these prompts has several tokens: next_token is a decode step's.
      r.cache_row_reads.prompt_start = r.cache_row_reads.next_block = CacheRowReads::Reads;
      return r;
    }
    void after_layer(const LayerSignals& s, KVCache& c) override { engine.after_layer(s, c); }
    void after_forward(int n, KVCache& c) override { engine.after_forward(n, c); }
  };
  const std::string blocks = (std::filesystem::temp_directory_path() / "kvevict_gpu_prompt_blocks.yaml").string();
  std::ofstream(blocks) << "name: window_blocks\nabout: window attention sums, prefilled in blocks\n"
                           "observe: {window: 16}\nprotect: {recent: 16}\nrun: {prefill: true, prefill_block: 48}\n"
                           "score: |\n  score[t] = if(t < T - W, sum(h, q: A[h, q, t]), 0)\n";
  const auto model = make_random_model(gqa_config(), 43);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies = {
      {"snapkv", {}}, {"cake", {}}, {"cake", {{"cascading", "true"}}}, {"tova", {}}, {"h2o", {}}, {blocks, {}},
      {"nacl", {{"budget_split", "explicit"}, {"explicit_sinks", "4"}, {"explicit_proxy", "0.1"}}},
      // The segment-local attention A_seg, made on the device in the prompt's call in both runs.
      {"chunkpress", {{"chunk", "32"}, {"window", "4"}}}, {"noncausal_attn", {{"chunk_size", "32"}}}};
  for (const auto& [name, params] : policies) {
    const auto policy = load_policy(name, params);
    auto placeholder = make_decoder(*model, DecoderDevice::Cuda, {});
    auto real = make_decoder(*model, DecoderDevice::Cuda, {});
    EvictionEngine e1(*policy, model->config, {Budget::parse("40"), 0}), e2(*policy, model->config, {Budget::parse("40"), 0});
    ReadsPromptRows reads(e2);
    const std::vector<int> prompt = random_prompt(160, 9);
    std::vector<float> a = prefill_prompt(*placeholder, prompt, &e1, &e1), b = prefill_prompt(*real, prompt, &e2, &reads);
    const DeviceKvStats after_prompt = placeholder->device_kv_stats();
    EXPECT_GT(after_prompt.counts.rows_placeholder, 0) << name;
    EXPECT_EQ(after_prompt.seconds.host_append, 0.0) << name << ": the prompt downloaded rows";
    EXPECT_GT(real->device_kv_stats().seconds.host_append, 0.0) << name;
    for (int s = 0; s < 12; ++s) {
      ASSERT_EQ(a, b) << name << ", call " << s;
      const int next = argmax(a);
      a = placeholder->forward(std::vector<int>{next}, &e1);
      b = real->forward(std::vector<int>{next}, &reads);
    }
    ASSERT_EQ(a, b) << name;
    ASSERT_TRUE(device_equals_host(*placeholder)) << name;  // cache(): placeholders filled
    const KVCache &x = placeholder->cache(), &y = real->cache();
    for (int l = 0; l < x.n_layers(); ++l)
      for (int h = 0; h < x.n_kv_heads(); ++h) {
        ASSERT_EQ(x.length(l, h), y.length(l, h)) << name;
        EXPECT_TRUE(std::equal(x.positions(l, h), x.positions(l, h) + x.length(l, h), y.positions(l, h))) << name;
      }
  }
  std::filesystem::remove(blocks);
#endif
}

// Policies that read key or value norms (ObservationRequest::row_norms): their host cache holds
// positions and the device's row norms only (DeviceKvMirror::hold_row_norms), computed by the
// kernel with the host's bits (row_norms.h), so knorm's prompt and the DecodingPress over key norms
// (compression every 4 steps) keep exactly the caches and logits of a decoder whose host cache
// takes every row (an observer declaring Reads), with no host append at all.
TEST(DeviceKvDecoderGpu, RowNormReadersRunOnPositionOnlyHostHeads) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 47);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies = {
      {"knorm", {}}, {"decoding", {{"compression_interval", "4"}}}};
  for (const auto& [name, params] : policies) {
    for (KvType type : {KvType::F16, KvType::F32}) {
      const std::string what = name + ", " + kv_type_name(type);
      const auto policy = load_policy(name, params);
      const std::vector<int> prompt = random_prompt(120, 13);
      RowlessAgainstReal run;
      run_rowless_against_real(*model, *policy, type, prompt, 16, what, run);
      if (HasFatalFailure()) return;
      const DeviceKvStats stats = run.rowless->device_kv_stats();
      EXPECT_GT(stats.counts.rows_placeholder, 0) << what;
      EXPECT_EQ(stats.seconds.host_append, 0.0) << what << ": rows were appended to the host";
      EXPECT_TRUE(some_head_shorter_than(run.rowless->cache(), static_cast<int>(prompt.size()) + 16))
          << what << ": nothing was evicted";
    }
  }
#endif
}

// Merge-on-evict run on the device cache (LayerSignals::cached_row_merges, the mirror over the
// device cache: device_kv_merges.h): D2O (prompt and every step), CAM (every 4 steps), LOOK-M's
// pivot, KVMerger's weighted and MergingPress's nearest folds keep exactly the caches and logits of a decoder whose host
// takes every row and merges there (the resync path: the folded rows uploaded), with no row
// appended to the host and rows folded on the device.
TEST(DeviceKvDecoderGpu, MergesRunOnTheDeviceCache) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 59);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies = {
      {"d2o", {}}, {"cam", {{"compression_interval", "4"}}}, {"look_m", {}}, {"kvmerger", {}}, {"merging_press", {}}};
  for (const auto& [name, params] : policies) {
    for (KvType type : {KvType::F16, KvType::F32}) {
      const std::string what = name + ", " + kv_type_name(type);
      const auto policy = load_policy(name, params);
      RowlessAgainstReal run;
      run_rowless_against_real(*model, *policy, type, random_prompt(120, 19), 16, what, run);
      if (HasFatalFailure()) return;
      const DeviceKvStats stats = run.rowless->device_kv_stats();
      EXPECT_GT(stats.counts.rows_folded, 0) << what << ": nothing was merged on the device";
      EXPECT_EQ(stats.seconds.host_append, 0.0) << what << ": rows were appended to the host";
      EXPECT_EQ(run.real->device_kv_stats().counts.rows_folded, 0) << what;
    }
  }
#endif
}

// StreamingLLM's default (positions re-assigned inside the cache after every eviction): its host
// cache holds positions only and the mirror re-rotates the keys on the device
// (DeviceKvMirror::reassign_on_device), with the same bits as the host's rotation
// (rope_rerotate_pair), so it keeps exactly the caches and logits of a decoder whose host cache
// takes every row and re-rotates it (the resync path), with no host append and no head resync.
TEST(DeviceKvDecoderGpu, ReassignedPositionsAreRotatedOnTheDevice) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 53);
  const auto policy = load_policy("streamingllm", {{"sinks", "4"}});
  for (KvType type : {KvType::F16, KvType::F32}) {
    const std::string what = kv_type_name(type);
    RowlessAgainstReal run;
    run_rowless_against_real(*model, *policy, type, random_prompt(120, 17), 16, what, run);
    if (HasFatalFailure()) return;
    const DeviceKvStats stats = run.rowless->device_kv_stats();
    EXPECT_GT(stats.counts.device_reassigns, 0) << what;
    EXPECT_EQ(stats.counts.head_resyncs, 0) << what << ": a head went through the host";
    EXPECT_EQ(stats.seconds.host_append, 0.0) << what << ": rows were appended to the host";
    EXPECT_GT(run.real->device_kv_stats().counts.head_resyncs, 0) << what;
    const KVCache& x = run.rowless->cache();
    for (int l = 0; l < x.n_layers(); ++l)
      for (int h = 0; h < x.n_kv_heads(); ++h) EXPECT_LE(x.length(l, h), 41) << what << ": no eviction";
  }
#endif
}

// MorphKV, Scissorhands and CAKE's paper indicator score every decode step by the window attention
// of the last W queries, which the decoder computes from the queries it holds on the device
// (query_window_ring.h; NoneGivenDecoderSignals): their host cache holds positions only at the
// prompt and while decoding, and they keep exactly the caches and logits of a decoder whose host
// cache takes every row (both engines read the decoder's window attention), with no host append.
// NACL evicting every 2 decode steps (non-causal proxy, its window from the prompt's length) reads
// rows at the prompt only: at its first decode step the decoder starts its held queries from the
// engine's (ObservationRequest::observer_queries), so every decode step's rows stay on the device.
TEST(DeviceKvDecoderGpu, RollingWindowDecodeIndicatorsRunOnPositionOnlyHostHeads) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 59);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies = {
      {"morphkv", {{"window", "16"}}},
      {"scissorhands", {{"history_window", "16"}}},
      {"cake", {{"decode_indicator", "mean_plus_gamma_var"}}},
      {"nacl", {{"decode_interval", "2"}, {"budget_split", "explicit"}, {"explicit_sinks", "4"}, {"explicit_proxy", "0.05"}}}};
  for (const auto& [name, params] : policies) {
    for (KvType type : {KvType::F16, KvType::F32}) {
      const std::string what = name + ", " + kv_type_name(type);
      const auto policy = load_policy(name, params);
      ASSERT_EQ(decode_cache_row_reads(policy->description()), CacheRowReads::NoneGivenDecoderSignals) << what;
      RowlessAgainstReal run;
      run_rowless_against_real(*model, *policy, type, random_prompt(120, 19), 16, what, run);
      if (HasFatalFailure()) return;
      const DeviceKvStats stats = run.rowless->device_kv_stats();
      EXPECT_GT(stats.counts.rows_placeholder, 0) << what;
      if (name != "nacl") {
        EXPECT_EQ(stats.seconds.host_append, 0.0) << what << ": rows were appended to the host";
      } else {
        EXPECT_EQ(stats.counts.rows_placeholder, 16 * model->config.n_layers * model->config.n_kv_heads)
            << what << ": a decode step's rows came to the host";
      }
      EXPECT_GT(run.real->device_kv_stats().seconds.host_append, 0.0) << what << ": the reference took no row";
      EXPECT_TRUE(some_head_shorter_than(run.rowless->cache(), 120 + 16)) << what << ": nothing was evicted";
    }
  }
#endif
}

// Between two decode evictions (decode_every > 1) a step scores nothing and reads no row: R-KV
// (keys) and CAM (key norms, value merges; its triggers too, MergesRunOnTheDeviceCache) every 4
// steps leave the other steps' rows on the device (placeholders, brought over once at R-KV's next
// trigger step) and keep exactly the caches and logits of a decoder whose host cache takes every row.
TEST(DeviceKvDecoderGpu, StepsBetweenDecodeEvictionsLeaveRowsOnTheDevice) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 61);
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> policies = {
      {"rkv", {{"decode_interval", "4"}}}, {"cam", {{"compression_interval", "4"}}}};
  for (const auto& [name, params] : policies) {
    const auto policy = load_policy(name, params);
    RowlessAgainstReal run;
    run_rowless_against_real(*model, *policy, KvType::F16, random_prompt(120, 23), 16, name, run);
    if (HasFatalFailure()) return;
    EXPECT_GT(run.rowless->device_kv_stats().counts.rows_placeholder, 0) << name;
    EXPECT_EQ(run.real->device_kv_stats().counts.rows_placeholder, 0) << name;
  }
#endif
}

// A policy that reads the prompt's rows on the host but none while decoding (KeyDiff: no decode
// eviction) lets the decoder drop the host's copy after the prompt (host_rows_not_read_later,
// DeviceKvMirror::release_host_rows): the host then reserves a fraction of the bytes of a decoder
// that keeps its rows, the decode steps take positions, the logits of every call are identical,
// and once asked the host cache equals the device cache again.
TEST(DeviceKvDecoderGpu, HostRowsAreReleasedAfterAPromptTheHostRead) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(gqa_config(), 67);
  const auto policy = load_policy("keydiff", {});
  ASSERT_EQ(prompt_cache_row_reads(policy->description()), CacheRowReads::Reads);
  RowlessAgainstReal run;
  run_rowless_against_real(*model, *policy, KvType::F16, random_prompt(120, 29), 8, "keydiff", run,
                           [](Decoder& rowless, Decoder& real) {
                             EXPECT_GT(rowless.device_kv_stats().counts.heads_released, 0);
                             EXPECT_EQ(real.device_kv_stats().counts.heads_released, 0);
                             EXPECT_LT(rowless.cache_layout().bytes_reserved(),
                                       real.cache_layout().bytes_reserved() / 4);
                           });
  if (HasFatalFailure()) return;
  EXPECT_GT(run.rowless->device_kv_stats().counts.rows_placeholder, 0);
#endif
}

// A prompt's evictions reach the device while the prompt runs: the CUDA decoder flushes the
// observer's keeps after each layer's observation, so CAKE's cascading stages shrink the layers
// before the next one appends (compactions counted by the time layer 1 is observed), and the
// arenas give their room back (DeviceKvLayout::layout_to_release): after the prompt the device
// holds far less than the full cache's arenas.
TEST(DeviceKvDecoderGpu, APromptsEvictionsShrinkTheDeviceCacheWhileThePromptRuns) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  struct Watch : ForwardObserver {
    EvictionEngine* engine = nullptr;
    Decoder* decoder = nullptr;
    std::vector<int64_t> compactions_before;  // [layer]: the decoder's count when the layer is observed
    ObservationRequest request() const override { return engine->request(); }
    void after_layer(const LayerSignals& s, KVCache& cache) override {
      compactions_before.push_back(decoder->device_kv_stats().counts.compactions);  // no flush
      engine->after_layer(s, cache);
    }
    void after_forward(int n, KVCache& cache) override { engine->after_forward(n, cache); }
  };
  const auto model = make_random_model(gqa_config(), 71);
  const auto cake = load_policy("cake", {{"cascading", "true"}});
  const std::vector<int> prompt = random_prompt(400, 31);
  auto full = make_decoder(*model, DecoderDevice::Cuda, {});
  full->forward(prompt);
  const std::optional<DeviceKvBytes> full_bytes = full->device_kv_bytes();
  auto decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  EvictionEngine engine(*cake, model->config, EngineOptions{Budget::parse("10%"), 0});
  Watch watch;
  watch.engine = &engine;
  watch.decoder = decoder.get();
  decoder->forward(prompt, &watch);
  ASSERT_EQ(watch.compactions_before.size(), static_cast<size_t>(model->config.n_layers));
  EXPECT_EQ(watch.compactions_before[0], 0);
  EXPECT_GT(watch.compactions_before[1], 0) << "layer 0's cascading keep was not on the device when layer 1 ran";
  const std::optional<DeviceKvBytes> kept_bytes = decoder->device_kv_bytes();
  ASSERT_TRUE(full_bytes && kept_bytes);
  EXPECT_LT(kept_bytes->reserved, full_bytes->reserved / 2)
      << "reserved " << kept_bytes->reserved << " of the full cache's " << full_bytes->reserved;
  decoder->reset();
  const std::optional<DeviceKvBytes> after_reset = decoder->device_kv_bytes();
  ASSERT_TRUE(after_reset);
  EXPECT_EQ(after_reset->reserved, 0u);
#endif
}

// Decoder::device_kv_stats' own side (bench_gpu_decode's decode breakdown): the host appends are
// timed on observed calls only (unobserved rows are deferred), the observation downloads only
// when an observer asks for something.
TEST(DeviceKvDecoderGpu, TheDecoderTimesItsHostAppendsAndObservationDownloads) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  struct Asks : ForwardObserver {
    int window = 0;
    ObservationRequest request() const override {
      ObservationRequest r;
      r.window = window;
      return r;
    }
    void after_layer(const LayerSignals&, KVCache&) override {}
  } queries, nothing;
  queries.window = 8;
  const auto model = make_random_model(gqa_config(), 37);
  auto decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  std::vector<float> logits = decoder->forward(random_prompt(60, 4), &queries);
  const DeviceKvSeconds after_prompt = decoder->device_kv_stats().seconds;
  EXPECT_GT(after_prompt.host_append, 0.0);
  EXPECT_GT(after_prompt.observation, 0.0);
  for (int s = 0; s < 5; ++s) logits = decoder->forward(std::vector<int>{argmax(logits)});  // nobody observes
  const DeviceKvSeconds unobserved = decoder->device_kv_stats().seconds;
  EXPECT_EQ(unobserved.host_append, after_prompt.host_append);
  EXPECT_EQ(unobserved.observation, after_prompt.observation);
  decoder->forward(std::vector<int>{argmax(logits)}, &nothing);  // observed, asks for nothing
  const DeviceKvSeconds observed = decoder->device_kv_stats().seconds;
  EXPECT_GT(observed.host_append, unobserved.host_append);
  EXPECT_EQ(observed.observation, unobserved.observation);
#endif
}

TEST(DeviceKvDecoderGpu, ResidentAndPackedUploadGiveTheSameLogits) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(gqa_config(), 29);
  const auto policy = load_policy("cake", {});
  auto resident = make_decoder(*model, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
  auto packed = make_decoder(*model, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::PackedUpload});
  EvictionEngine e1(*policy, model->config, {Budget::parse("64"), 0});
  EvictionEngine e2(*policy, model->config, {Budget::parse("64"), 0});
  const std::vector<int> prompt = random_prompt(140, 9);
  std::vector<float> a = resident->forward(prompt, &e1), b = packed->forward(prompt, &e2);
  float worst = 0;
  for (int s = 0; s < 10; ++s) {
    // Same words, same conversion, same kernels: only the order of cuBLAS work could differ.
    worst = std::max(worst, max_abs_diff(a, b));
    ASSERT_LE(max_abs_diff(a, b), 1e-4f * logit_bound(a) / 0.02f) << "step " << s;
    const int next = argmax(a);
    a = resident->forward(std::vector<int>{next}, &e1);
    b = packed->forward(std::vector<int>{next}, &e2);
  }
  std::printf("resident vs packed upload: max |dlogit| = %g\n", worst);
}

}  // namespace
}  // namespace kvevict
