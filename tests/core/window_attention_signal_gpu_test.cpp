// The CUDA decoder's window attention for its observer (ObservationRequest::window_attention,
// LayerSignals::window_attention) - GPU only; skipped with the reason when the build has no CUDA
// or no usable device. Passed on an H200 on 2026-12-04 (docs/CUDA.md).
//  - WindowAttentionSignalGpu: the device buffer the decoder fills right after each layer's append,
//    downloaded, against window_attention_twin over the same layer of the host cache (a random GQA
//    model: group 3, head_dim 16), at the prefill, on a decode block over a cache compacted in
//    ascending (snapkv) and score (cake) order, and on one-token steps (whose window attention
//    covers the last W queries of the sequence, the previous calls' held by the decoder:
//    query_window_ring.h); the description (W, position, strides) against the twin's plan. Tolerance as window_attention_gpu_test.cpp:
//    |got - twin| <= 1e-5 * twin + 1e-7, and the twin's exact zeros exact.
//  - WindowAttentionEngineGpu: an engine on the CUDA decoder keeps the same cache (positions per
//    (layer, head) in cache order) reading the device buffer as computing A on the host (the
//    request stripped, test::WithoutWindowAttention), on stories260K, in lockstep: the caches may
//    part on near ties only (lockstep_eviction.h); the report proves the buffer was downloaded and
//    read; MorphKV and Scissorhands read it at every decode step too (the rolling window of the
//    last W queries). The packed upload (no device positions) leaves A to the engine.
// The CPU proof of the same wiring: window_attention_engine_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/decode/query_window_ring.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#include "dsl/policy_loader.h"
#include "gpu_test_skip.h"
#include "lockstep_eviction.h"
#include "stories_prompt_test.h"
#include "window_attention_injection.h"

namespace kvevict {
namespace {

constexpr double kRel = 1e-5, kAbs = 1e-7;

// Checks the decoder's buffer against the twin in every after_layer, then hands the layer to the
// engine (which evicts, so later calls see compacted caches).
class CheckingObserver : public ForwardObserver {
 public:
  CheckingObserver(EvictionEngine& engine, int W, int group) : engine_(engine), W_(W), group_(group) {}
  ObservationRequest request() const override {
    ObservationRequest r = engine_.request();
    r.window = std::max(r.window, W_);
    r.window_attention = W_;
    // The twin reference below reads the host cache's rows: every call must keep them there (SnapKV
    // and CAKE declare no prompt row reads given the decoder's signals, which would leave the host
    // placeholders; and W_ differs from the engine's window, so the engine computes A from rows).
    r.cache_row_reads = CacheRowReadsByCall{};
    r.host_rows_not_read_later = false;
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    hold(s, cache);
    check(s, cache);
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }
  int checked = 0;
  int beyond_block = 0;  // layers whose window reached into the previous calls
  double worst = 0;

 private:
  // The newest W_ queries of each layer, from the blocks' window queries (the request asks for at
  // least W_ of each block), as the decoder holds them on the device.
  void hold(const LayerSignals& s, const KVCache& cache) {
    if (held_.empty()) {
      held_.resize(static_cast<size_t>(cache.n_layers()));
      rings_.resize(held_.size());
    }
    const size_t row = s.window_queries.size() / static_cast<size_t>(s.window);
    apply_query_window_update(rings_[s.layer].append(s.first_position + s.n_tokens - s.window, s.window, W_),
                              held_[s.layer], s.window_queries.data(), row);
  }
  void check(const LayerSignals& s, const KVCache& cache) {
    const WindowAttentionSignal& a = s.window_attention;
    ASSERT_FALSE(a.empty()) << "layer " << s.layer << ": the decoder filled no buffer";
    ASSERT_TRUE(a.on_device);
    WindowAttentionPlan plan;
    const int end = s.first_position + s.n_tokens, W = std::min(W_, end);
    const QueryWindowRing& ring = rings_[s.layer];
    ASSERT_EQ(ring.end_position(), end);
    ASSERT_GE(ring.rows(), W);
    const size_t row = held_[s.layer].size() / static_cast<size_t>(ring.rows());
    const std::vector<float> want = test::twin_window_attention(
        cache, s.layer, held_[s.layer].data() + static_cast<size_t>(ring.rows() - W) * row, W, end - W, group_, plan);
    beyond_block += W > s.n_tokens;
    const WindowAttentionSignal d = describe_window_attention(plan, a.data, true);
    ASSERT_EQ(a.W, d.W);
    ASSERT_EQ(a.query_position0, d.query_position0);
    ASSERT_EQ(a.n_kv, d.n_kv);
    ASSERT_EQ(a.group, d.group);
    ASSERT_EQ(a.max_len, d.max_len);
    ASSERT_EQ(a.row_stride, d.row_stride);
    ASSERT_EQ(a.group_stride, d.group_stride);
    ASSERT_EQ(a.kv_stride, d.kv_stride);
    std::vector<float> got;
    download_window_attention(a, got);
    ASSERT_EQ(got.size(), want.size());
    for (size_t e = 0; e < want.size(); ++e) {
      const double err = std::abs(double(got[e]) - want[e]);
      if (want[e] == 0.0f) {
        ASSERT_EQ(got[e], 0.0f) << "layer " << s.layer << " element " << e;
      }
      ASSERT_LE(err, kRel * want[e] + kAbs) << "layer " << s.layer << " element " << e;
      worst = std::max(worst, err / (want[e] + kAbs));
    }
    ++checked;
  }

  EvictionEngine& engine_;
  int W_, group_;
  std::vector<QueryWindowRing> rings_;
  std::vector<std::vector<float>> held_;
};

void check_under_policy(const std::string& name) {
  const auto model = make_random_model(test::gqa_test_config("window-signal-test"), 31);
  const auto policy = load_policy(name, {});
  auto gpu = make_decoder(*model, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
  EvictionEngine engine(*policy, model->config, {Budget::parse("48"), 0});
  CheckingObserver observer(engine, 16, model->config.group_size());
  std::mt19937 rng(9);
  std::vector<int> prompt(160);
  for (int& t : prompt) t = int(rng() % 300);
  gpu->forward(prompt, &observer);
  ASSERT_TRUE(engine.report().prefill_evicted) << name;
  gpu->forward(std::span<const int>(prompt).subspan(3, 20), &observer);  // a block on the compacted cache
  for (int s = 0; s < 2; ++s) gpu->forward(std::span<const int>(prompt).subspan(40 + s, 1), &observer);
  EXPECT_EQ(observer.checked, 4 * model->config.n_layers) << name;
  EXPECT_EQ(observer.beyond_block, 2 * model->config.n_layers) << name << ": the one-token steps' window";
  std::printf("[ info ] %s: worst relative difference %.3g\n", name.c_str(), observer.worst);
}

TEST(WindowAttentionSignalGpu, CudaDecoderFillsTheTwinsWindowAttention) {
  SKIP_WITHOUT_GPU();
  check_under_policy("snapkv");  // ascending keeps
  check_under_policy("cake");    // score-ordered keeps, cascading
}

// Asks for the window attention of the last W queries and keeps, per call, every layer's buffer
// downloaded (empty when the decoder served none).
class RecordsWindowAttention : public ForwardObserver {
 public:
  explicit RecordsWindowAttention(int W) : W_(W) {}
  ObservationRequest request() const override { return {.window_attention = W_}; }
  void after_layer(const LayerSignals& s, KVCache&) override {
    std::vector<float> got;
    if (!s.window_attention.empty()) download_window_attention(s.window_attention, got);
    calls.back().push_back(std::move(got));
  }
  void start_call() { calls.emplace_back(); }
  std::vector<std::vector<std::vector<float>>> calls;  // [call][layer][floats]

 private:
  int W_;
};

// The queries the decoder holds come back with a snapshot (the eval sweep restores the prefill's
// and decodes every (policy, budget) from it): after a restore, the first decode step's window
// attention covers the same W queries as the first step after the snapshot, bit for bit; a reset
// forgets them (a one-token call at position 0 serves one row).
TEST(WindowAttentionSignalGpu, HeldQueriesComeBackWithASnapshot) {
  SKIP_WITHOUT_GPU();
  const auto model = make_random_model(test::gqa_test_config("window-signal-test"), 37);
  auto gpu = make_decoder(*model, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
  RecordsWindowAttention observer(8);
  std::vector<int> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((i * 37) % 300);
  observer.start_call();
  gpu->forward(prompt, &observer);
  const auto snap = gpu->snapshot();
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) gpu->restore(*snap);
    for (int s = 0; s < 3; ++s) {
      observer.start_call();
      gpu->forward(std::vector<int>{5 + s}, &observer);
    }
  }
  const int L = model->config.n_layers;
  ASSERT_EQ(observer.calls.size(), 7u);
  for (int c = 1; c <= 3; ++c)
    for (int l = 0; l < L; ++l) {
      ASSERT_FALSE(observer.calls[c][l].empty()) << "step " << c << " layer " << l << ": no window attention";
      EXPECT_EQ(observer.calls[c][l], observer.calls[c + 3][l]) << "step " << c << " layer " << l << " after restore";
    }
  gpu->reset();
  observer.start_call();
  gpu->forward(std::vector<int>{7}, &observer);
  ASSERT_FALSE(observer.calls.back()[0].empty());
  EXPECT_EQ(observer.calls.back()[0].size(), static_cast<size_t>(model->config.n_heads))
      << "after a reset the window is the one query of the new sequence (one entry per query head)";
}

class WindowAttentionEngineGpu : public test::StoriesPromptTest {};

// A reads the decoder's device buffer, B computes A on the host (its request stripped); both run on
// the CUDA decoder in lockstep (test::eviction_in_lockstep): the caches must stay the same, or part
// on near ties only (the kernel's and the host's A differ by rounding: 1e-6 relative on the CPU
// twin), and the logits on the same caches agree to rounding.
TEST_F(WindowAttentionEngineGpu, SameCacheWithAndWithoutTheDeviceBuffer) {
  SKIP_WITHOUT_GPU();
  const int heads = model_->config.n_layers * model_->config.n_kv_heads;
  for (const char* name : {"snapkv", "pyramidkv", "adakv", "cake", "tova", "morphkv", "scissorhands"}) {
    const auto policy = load_policy(name, {});
    auto a = make_decoder(*model_, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
    auto b = make_decoder(*model_, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::Resident});
    EngineOptions options{Budget::parse("48"), 3};
    options.trace_selection = true;
    EvictionEngine ea(*policy, model_->config, options), eb(*policy, model_->config, options);
    test::WithoutWindowAttention stripped(eb);
    test::LockstepOutcome outcome;
    const auto bound = [](const std::vector<float>& l) { return 1e-3f * test::logit_bound(l); };
    EXPECT_TRUE(test::eviction_in_lockstep(*a, ea, *b, eb, tokens_, 4, bound, &outcome, &stripped)) << name;
    EXPECT_GE(ea.report().window_attention_reused, heads) << name << ": the device buffer was not read";
    EXPECT_GT(ea.report().window_attention_downloads, 0) << name;
    EXPECT_EQ(eb.report().window_attention_reused, 0) << name;
    std::printf("[ info ] %s: %d calls on the same caches, fork %s\n", name, outcome.same_cache_steps,
                outcome.fork.describe().c_str());
  }
}

TEST_F(WindowAttentionEngineGpu, PackedUploadLeavesItToTheEngine) {
  SKIP_WITHOUT_GPU();
  const auto policy = load_policy("snapkv", {});
  auto packed = make_decoder(*model_, DecoderDevice::Cuda, {.device_kv = DeviceKvMode::PackedUpload});
  EvictionEngine engine(*policy, model_->config, {Budget::parse("48"), 3});
  packed->forward(tokens_, &engine);
  EXPECT_TRUE(engine.report().prefill_evicted);
  EXPECT_EQ(engine.report().window_attention_reused, 0);
  EXPECT_EQ(engine.report().window_attention_downloads, 0);
}

}  // namespace
}  // namespace kvevict
