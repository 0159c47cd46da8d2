// KVzip's replay attention on a CUDA device (core/decode/cuda/replay_attention.h) against the twin
// (replay_attention_twin: the same gather, the window attention kernel's twin per piece, the same
// maxima on the CPU), with the pieces the default bound gives and with pieces of a few rows; the
// CUDA decoder's, made on the device in a replay's call, against the host rule over its own
// queries; and the replay pass on the CUDA decoder end to end (the cache as it was, no row on the
// host). GPU only: skipped with the reason without CUDA or a usable device.
//
// Tolerance: each probability is the window attention kernel's, held to its twin by
// window_attention_gpu_test.cpp at |got - twin| <= 1e-5 * twin + 1e-7; a max of such values, times
// the same f32 factor on both sides, is held to the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/decode/device_kv_twin.h"
#include "core/decode/replay_attention_block.h"
#include "core/util/error.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/replay_attention.h"
#include "core/decode/make_decoder.h"
#include "core/engine/replay_pass.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#include "packed_device_layer.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)
struct Case {
  int n_kv, group, d;
  ReplayAttentionRequest request;
  int R;
  KvType type;
  size_t max_piece_floats;
  std::string label() const {
    const ReplayAttentionRequest& r = request;
    return std::to_string(n_kv) + "x" + std::to_string(group) + " d" + std::to_string(d) + " L" +
           std::to_string(r.context) + " chunk [" + std::to_string(r.first) + ", " + std::to_string(r.end) + ") sinks " +
           std::to_string(r.sinks) + " R" + std::to_string(R) + (r.hidden_normalised ? " normalised " : " ") +
           kv_type_name(type) + " pieces<=" + std::to_string(max_piece_floats);
  }
};

void run_case(const Case& c, cuda::ReplayAttentionBuffer& buffer, uint32_t seed) {
  SCOPED_TRACE(c.label());
  const int n_heads = c.n_kv * c.group, n = c.request.context + c.R;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, std::pow(float(c.d), -0.25f) * 1.2f);
  DeviceKvTwin twin(DeviceKvGeometry{1, c.n_kv, c.d, c.type});
  test::write_random_rows(twin, c.n_kv, c.d, n, rng, normal);
  std::vector<float> queries(size_t(c.R) * n_heads * c.d);
  for (float& q : queries) q = normal(rng);
  std::vector<double> factors;
  std::vector<float> factors_f32;
  if (c.request.hidden_normalised) {
    std::uniform_real_distribution<double> f(0.01, 0.2);
    for (int i = 0; i < c.R; ++i) factors.push_back(f(rng));
    factors_f32.assign(factors.begin(), factors.end());
  }
  const DeviceKvLayerView host = twin.layer_view(0);
  const BlockReplayAttention want = replay_attention_twin(host, c.group, queries.data(), c.R, c.request,
                                                          factors.empty() ? nullptr : factors_f32.data(),
                                                          c.max_piece_floats);
  const test::PackedDeviceLayer packed(host);  // the twin's heads on the device
  cuda::DeviceArray<float> dq;
  dq.upload(queries);
  const DeviceKvLayerView& view = packed.view;
  const BlockReplayAttention got =
      buffer.compute(view, c.group, dq.data(), c.R, c.request, factors, c.max_piece_floats);
  ASSERT_EQ(got.n_heads, want.n_heads);
  ASSERT_EQ(got.first, want.first);
  ASSERT_EQ(got.length, want.length);
  ASSERT_EQ(got.values.size(), want.values.size());
  double worst = 0;
  size_t at = 0;
  for (size_t e = 0; e < want.values.size(); ++e) {
    const double w = want.values[e], g = got.values[e];
    const double ratio = std::isfinite(g) ? std::abs(g - w) / (1e-5 * w + 1e-7) : INFINITY;
    if (ratio > worst) worst = ratio, at = e;
  }
  EXPECT_LE(worst, 1.0) << "element " << at << " got " << got.values[at] << " twin " << want.values[at];
}

TEST(ReplayAttentionGpu, TheRunnerMatchesTheTwin) {
  SKIP_WITHOUT_GPU();
  cuda::ReplayAttentionBuffer buffer;  // reused across cases, as the decoder reuses it across layers
  const size_t whole = size_t{1} << 26;
  const std::vector<Case> cases = {
      {2, 2, 16, {40, 0, 16, 0, false}, 9, KvType::F16, whole},       // the first chunk: no sinks
      {2, 2, 16, {40, 16, 32, 4, false}, 12, KvType::F16, whole},     // a middle chunk behind 4 sinks
      {3, 2, 8, {50, 48, 50, 4, true}, 5, KvType::F32, whole},        // a short last chunk, KVzip+'s factors
      {2, 4, 32, {30, 10, 30, 10, false}, 20, KvType::BF16, whole},
      {1, 4, 16, {300, 128, 256, 4, false}, 40, KvType::F16, 1},      // one row per piece
      {2, 2, 16, {40, 16, 32, 4, false}, 12, KvType::F16, 4 * 32 * 3 + 1},  // three rows per piece
      // An 8B-like layer (8 KV heads of 32 query heads, head_dim 128) behind kvpress's 4 sinks, a
      // chunk of 256 and a replay input of 270 tokens, in pieces of 100 rows (small enough for the
      // device check's memcheck pass and the twin's single CPU thread).
      {8, 4, 128, {512, 256, 512, 4, false}, 270, KvType::F16, size_t{32} * (4 + 256 + 270) * 100},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) run_case(c, buffer, seed++);
}

// Records what a replay's call hands its observer (as the replay pass asks: NoneGivenDecoderSignals,
// so the host cache takes placeholder rows) and every query of the block beside it.
struct HeldReplay : ForwardObserver {
  ReplayAttentionRequest asked;
  std::vector<std::vector<float>> queries;  // per layer, the block's queries
  std::vector<BlockReplayAttention> given;  // per layer
  ObservationRequest request() const override {
    ObservationRequest r;
    r.window = 1 << 20;
    r.replay_attention = asked;
    r.cache_row_reads = {CacheRowReads::NoneGivenDecoderSignals, CacheRowReads::NoneGivenDecoderSignals,
                         CacheRowReads::NoneGivenDecoderSignals};
    return r;
  }
  void after_layer(const LayerSignals& s, KVCache&) override {
    ASSERT_NE(s.replay_attention, nullptr) << "layer " << s.layer;
    ASSERT_EQ(s.window, s.n_tokens);
    queries.emplace_back(s.window_queries.begin(), s.window_queries.end());
    given.push_back(*s.replay_attention);
  }
};

// A prompt's observer that reads no row (the engine's declaration for kvzip's prompt).
struct ReadsNothing : ForwardObserver {
  ObservationRequest request() const override {
    ObservationRequest r;
    r.cache_row_reads = {CacheRowReads::None, CacheRowReads::None, CacheRowReads::None};
    return r;
  }
  void after_layer(const LayerSignals&, KVCache&) override {}
};

// The CUDA decoder's answer to ObservationRequest::replay_attention, made on the device (the host
// cache holds placeholders: the host rule could not have made it), against the host rule over the
// same decoder's own queries and its cache brought to the host after the call. Tolerance: the
// kernel is held to its twin at 1e-5 relative, the twin to the host rule at 1e-3 relative + 1e-7
// (replay_attention_block_test.cpp): 1.1e-3 relative + 2e-7.
TEST(ReplayAttentionGpu, TheCudaDecoderMakesTheHostRuleOfItsOwnQueries) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = test::gqa_test_config("replay-attention-gpu");
  const auto model = make_random_model(config, 29);
  auto decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  std::vector<int> context(120), replay(40);
  for (size_t i = 0; i < context.size(); ++i) context[i] = static_cast<int>((i * 53 + 7) % config.vocab_size);
  for (size_t i = 0; i < replay.size(); ++i) replay[i] = static_cast<int>((i * 31 + 3) % config.vocab_size);
  ReadsNothing prompt;
  decoder->forward(context, &prompt);
  HeldReplay held;
  held.asked = {int(context.size()), 48, 96, 4, false};
  decoder->forward(replay, &held);
  ASSERT_EQ(held.given.size(), size_t(config.n_layers));
  EXPECT_GT(decoder->device_kv_stats().counts.rows_placeholder, 0) << "the host rule could have made it";
  EXPECT_EQ(decoder->device_kv_stats().seconds.host_append, 0.0) << "rows came to the host";
  KVCache& cache = decoder->cache();  // the rows brought to the host
  const int R = static_cast<int>(replay.size());
  for (int layer = 0; layer < config.n_layers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const BlockReplayAttention want =
        block_replay_attention(held.asked, held.queries[size_t(layer)].data(), R, {}, cache, layer, config.n_heads);
    const BlockReplayAttention& got = held.given[size_t(layer)];
    ASSERT_EQ(got.n_heads, want.n_heads);
    ASSERT_EQ(got.first, want.first);
    ASSERT_EQ(got.length, want.length);
    for (size_t e = 0; e < want.values.size(); ++e)
      ASSERT_LE(std::abs(double(got.values[e]) - want.values[e]), 1.1e-3 * want.values[e] + 2e-7)
          << "element " << e << " got " << got.values[e] << " host rule " << want.values[e];
  }
}

// The replay pass on the CUDA decoder: scores near the CPU decoder's (the two decoders' queries and
// keys differ by fp16 weights and cuBLAS, their logits by up to logit_bound's 2%: 5e-2 relative +
// 1e-3 on each probability, where a wrong chunk, sink or mask is off by O(1)), the cache and position
// as the prefill left them, no row on the host.
TEST(ReplayAttentionGpu, TheReplayPassRunsOnTheDeviceCache) {
  SKIP_WITHOUT_GPU();
  const ModelConfig config = test::gqa_test_config("replay-pass-gpu");
  const auto model = make_random_model(config, 31);
  std::vector<int> context(150);
  for (size_t i = 0; i < context.size(); ++i) context[i] = static_cast<int>((i * 37 + 11) % config.vocab_size);
  const ReplayPrompt prompt{{5, 6, 7}, {8, 9}, {10}};
  const ReplayOptions options{.chunk = 64, .previous_tail = 8, .n_sink = 4};
  auto cuda_decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  auto cpu_decoder = make_cpu_decoder(*model, {.threads = 1});
  ReadsNothing reads_nothing;
  cuda_decoder->forward(context, &reads_nothing);
  cpu_decoder->forward(context);
  const ReplayScores got = replay_scores(*cuda_decoder, context, prompt, options);
  const ReplayScores want = replay_scores(*cpu_decoder, context, prompt, options);
  EXPECT_EQ(cuda_decoder->device_kv_stats().seconds.host_append, 0.0) << "rows came to the host";
  EXPECT_EQ(cuda_decoder->position(), int(context.size()));
  const KVCache& cache = cuda_decoder->cache_layout();
  for (int l = 0; l < config.n_layers; ++l)
    for (int h = 0; h < config.n_kv_heads; ++h) EXPECT_EQ(cache.length(l, h), int(context.size()));
  ASSERT_EQ(got.scores.size(), want.scores.size());
  for (size_t e = 0; e < want.scores.size(); ++e)
    ASSERT_LE(std::abs(double(got.scores[e]) - want.scores[e]), 5e-2 * want.scores[e] + 1e-3) << "score " << e;
}

// The decoder asks before a call whether the scratch fits (serves_replay_attention): kvpress's
// defaults on an 8B layer do; a replay whose gathered rows alone pass half the free memory does not.
TEST(ReplayAttentionGpu, BufferAnswersFromTheDevicesFreeMemory) {
  SKIP_WITHOUT_GPU();
  cuda::ReplayAttentionBuffer buffer;
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_TRUE(buffer.can_hold({131072, 2048, 4096, 4, false}, 2070, 8, 32, 128, 2));
  // A chunk of 2^30 entries over 8 heads of head_dim 128 in F32: 4 TiB of gathered keys.
  const int big = 1 << 30;
  EXPECT_FALSE(buffer.can_hold({big, 0, big, 0, false}, 1, 8, 32, 128, 4));
}

// The runner's checks come before any CUDA call: tested wherever the build has CUDA, device or not.
TEST(ReplayAttentionGpu, RefusesAViewThatIsNotAReplay) {
  cuda::ReplayAttentionBuffer buffer;
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.head_dim = 16;
  v.length[0] = 50, v.length[1] = 49;
  v.keys = reinterpret_cast<const void*>(16);  // never read: refused first
  v.positions = reinterpret_cast<const int32_t*>(16);
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {40, 0, 16, 0, false}, {}), UsageError);
  v.length[1] = 50;
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {40, 16, 16, 0, false}, {}), UsageError) << "an empty chunk";
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {40, 0, 16, 0, false}, {1.0}), UsageError) << "factors";
  v.head_dim = 512;
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {40, 0, 16, 0, false}, {}), UsageError) << "head_dim past the kernel's";
}
#endif

}  // namespace
}  // namespace kvevict
