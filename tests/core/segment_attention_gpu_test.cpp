// The prompt's segment-local attention on a CUDA device (core/decode/cuda/segment_attention.h)
// against the twin (segment_attention_twin: the same pieces, the window attention kernel's twin, the
// same sums on the CPU), with the pieces the default bound gives, with pieces of a few rows and with
// rows split along a long segment; and the CUDA decoder's, made on the device in a prompt's call,
// against the host rule. GPU only: skipped with the reason without CUDA or a usable device.
//
// Tolerance: each piece is the window attention kernel, held to its twin by
// window_attention_gpu_test.cpp at |got - twin| <= 1e-5 * twin + 1e-7 per probability; an A_seg
// entry sums at most W of them in the same order on both sides, so it is held to 1e-5 relative +
// W * 1e-7. Entries the twin leaves exactly 0 (none here: every entry is seen by a query of its
// segment) would have to be 0 too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/decode/device_kv_twin.h"
#include "core/decode/segment_attention_block.h"
#include "core/util/error.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/segment_attention.h"
#include "core/decode/make_decoder.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#include "packed_device_layer.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)
struct Case {
  int n_kv, group, d, n, segment, window;
  bool causal, scaled;
  KvType type;
  size_t max_piece_floats;
  std::string label() const {
    return std::to_string(n_kv) + "x" + std::to_string(group) + " d" + std::to_string(d) + " n" + std::to_string(n) +
           " seg" + std::to_string(segment) + " W" + std::to_string(window) + (causal ? " causal" : " non-causal") +
           (scaled ? " scaled " : " unscaled ") + kv_type_name(type) + " pieces<=" + std::to_string(max_piece_floats);
  }
};

void run_case(const Case& c, cuda::SegmentAttentionBuffer& buffer, uint32_t seed) {
  SCOPED_TRACE(c.label());
  const int n_heads = c.n_kv * c.group;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, std::pow(float(c.d), -0.25f) * 1.2f);
  DeviceKvTwin twin(DeviceKvGeometry{1, c.n_kv, c.d, c.type});
  test::write_random_rows(twin, c.n_kv, c.d, c.n, rng, normal);
  std::vector<float> queries(size_t(c.n) * n_heads * c.d);
  for (float& q : queries) q = normal(rng);
  const DeviceKvLayerView host = twin.layer_view(0);
  const SegmentAttentionRequest request{c.segment, c.window, c.causal, c.scaled};
  const BlockSegmentAttention want = segment_attention_twin(host, c.group, queries.data(), c.n, request,
                                                            c.max_piece_floats);
  const test::PackedDeviceLayer packed(host);  // the twin's heads on the device
  cuda::DeviceArray<float> dq;
  dq.upload(queries);
  const DeviceKvLayerView& view = packed.view;
  const BlockSegmentAttention got = buffer.compute(view, c.group, dq.data(), c.n, request, c.max_piece_floats);
  ASSERT_EQ(got.n_heads, want.n_heads);
  ASSERT_EQ(got.length, want.length);
  ASSERT_EQ(got.values.size(), want.values.size());
  const double abs = std::min(c.window, c.segment) * 1e-7;
  double worst = 0;
  size_t at = 0;
  for (size_t e = 0; e < want.values.size(); ++e) {
    const double w = want.values[e], g = got.values[e];
    const double ratio = w == 0.0 ? (g == 0.0 ? 0.0 : INFINITY)
                                  : std::isfinite(g) ? std::abs(g - w) / (1e-5 * w + abs) : INFINITY;
    if (ratio > worst) worst = ratio, at = e;
  }
  EXPECT_LE(worst, 1.0) << "element " << at << " got " << got.values[at] << " twin " << want.values[at];
}

TEST(SegmentAttentionGpu, TheRunnerMatchesTheTwin) {
  SKIP_WITHOUT_GPU();
  cuda::SegmentAttentionBuffer buffer;  // reused across cases, as the decoder reuses it across layers
  const size_t whole = size_t{1} << 26;
  const std::vector<Case> cases = {
      {2, 2, 16, 37, 8, 3, true, true, KvType::F16, whole},
      {3, 2, 8, 50, 16, 16, false, false, KvType::F32, whole},
      {2, 1, 32, 20, 7, 100, true, true, KvType::BF16, whole},
      {2, 4, 8, 11, 64, 4, true, true, KvType::F16, whole},
      {4, 1, 16, 9, 1, 1, false, true, KvType::F32, whole},
      {1, 4, 16, 300, 64, 32, true, false, KvType::F16, 1},            // one row per piece
      {2, 2, 16, 37, 8, 3, true, true, KvType::F16, 4 * 8 * 2 + 1},    // two rows per piece
      // NonCausalAttnPress and ChunkPress at kvpress's defaults on an 8B-like layer (8 KV heads of
      // 32 query heads, head_dim 128): 2048 prompt positions.
      {8, 4, 128, 2048, 256, 256, false, false, KvType::F16, whole},
      {8, 4, 128, 2048, 1024, 64, true, true, KvType::F16, whole},
      {8, 4, 128, 2000, 1024, 64, true, true, KvType::BF16, 32 * 1024 * 5},  // a short last segment, 5-row pieces
      // A segment of 2048 entries: the window attention plan splits each row along it (two chunks),
      // so the partials beside each piece's output are written and merged.
      {8, 4, 128, 2048, 2048, 64, true, true, KvType::F16, whole},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) run_case(c, buffer, seed++);
}

// The CUDA decoder's answer to ObservationRequest::segment_attention in a prompt's call, made on
// the device (the observer reads no cached row, so the host cache holds placeholders: the host rule
// could not have made it), against the host rule over the same decoder's own queries (every query
// asked for beside it) and its cache brought to the host after the call. Tolerance: the window
// attention kernel is held to its twin at 1e-5 relative, the twin to the host rule at 1e-3 relative
// + W * 1e-7 (segment_attention_block_test.cpp): 1.1e-3 relative + W * 2e-7.
TEST(SegmentAttentionGpu, TheCudaDecoderMakesTheHostRuleOfItsOwnQueries) {
  SKIP_WITHOUT_GPU();
  struct Held : ForwardObserver {
    SegmentAttentionRequest asked{32, 6, true, true};
    const ModelConfig* config = nullptr;
    std::vector<std::vector<float>> queries;    // per layer, every query of the prompt
    std::vector<BlockSegmentAttention> given;  // per layer, the decoder's A_seg
    ObservationRequest request() const override {
      ObservationRequest r;
      r.window = config->context_length;
      r.segment_attention = asked;
      r.cache_row_reads.prompt_start = CacheRowReads::NoneGivenDecoderSignals;
      return r;
    }
    void after_layer(const LayerSignals& s, KVCache&) override {
      ASSERT_NE(s.segment_attention, nullptr) << "layer " << s.layer;
      ASSERT_EQ(s.window, s.n_tokens);
      queries.emplace_back(s.window_queries.begin(), s.window_queries.end());
      given.push_back(*s.segment_attention);
    }
  } held;
  const ModelConfig config = test::gqa_test_config("segment-attention-gpu");
  held.config = &config;
  const auto model = make_random_model(config, 23);
  auto decoder = make_decoder(*model, DecoderDevice::Cuda, {});
  std::vector<int> prompt(150);  // four segments of 32 and a short one
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int>((i * 53 + 7) % config.vocab_size);
  decoder->forward(prompt, &held);
  ASSERT_EQ(held.given.size(), size_t(config.n_layers));
  EXPECT_GT(decoder->device_kv_stats().counts.rows_placeholder, 0) << "the host rule could have made it";
  KVCache& cache = decoder->cache();  // the rows brought to the host
  const int n = static_cast<int>(prompt.size());
  for (int layer = 0; layer < config.n_layers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const BlockSegmentAttention want =
        block_segment_attention(held.asked, held.queries[size_t(layer)].data(), n, cache, layer, config.n_heads);
    const BlockSegmentAttention& got = held.given[size_t(layer)];
    ASSERT_EQ(got.n_heads, want.n_heads);
    ASSERT_EQ(got.length, want.length);
    ASSERT_EQ(got.values.size(), want.values.size());
    const double abs = held.asked.window * 2e-7;
    for (size_t e = 0; e < want.values.size(); ++e)
      ASSERT_LE(std::abs(double(got.values[e]) - want.values[e]), 1.1e-3 * want.values[e] + abs)
          << "element " << e << " got " << got.values[e] << " host rule " << want.values[e];
  }
}

// The decoder asks before a call whether the scratch fits (serves_segment_attention): a small
// prompt does, a prompt whose largest piece and output need more than half the free memory does not.
TEST(SegmentAttentionGpu, BufferAnswersFromTheDevicesFreeMemory) {
  SKIP_WITHOUT_GPU();
  cuda::SegmentAttentionBuffer buffer;
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_TRUE(buffer.can_hold({256, 64, true, true}, 2048, 32));
  // One segment over the whole prompt, every row in one piece of at most 2^26 floats, and an output of
  // n_heads x n floats: n chosen so that the output alone is more than half the free memory.
  const int n_heads = 64;
  const size_t n = std::min<size_t>(free / sizeof(float) / n_heads, size_t{1} << 30);
  ASSERT_GT(n, size_t{1} << 20);
  EXPECT_FALSE(buffer.can_hold({int(n), 64, true, true}, int(n), n_heads));
}

// The runner's checks come before any CUDA call: tested wherever the build has CUDA, device or not.
TEST(SegmentAttentionGpu, RefusesAViewThatIsNotAPrompt) {
  cuda::SegmentAttentionBuffer buffer;
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.head_dim = 16;
  v.length[0] = 10, v.length[1] = 9;
  v.positions = reinterpret_cast<const int32_t*>(16);  // never read: refused first
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {4, 2, true, true}), UsageError);
  v.length[1] = 10;
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {0, 2, true, true}), UsageError) << "not enabled";
  v.head_dim = 512;
  EXPECT_THROW(buffer.compute(v, 1, nullptr, 10, {4, 2, true, true}), UsageError) << "head_dim past the kernel's";
}
#endif

}  // namespace
}  // namespace kvevict
