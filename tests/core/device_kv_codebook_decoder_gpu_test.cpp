// SpindleKV's codebook heads in the CUDA decoder's decode loop - GPU only; skipped with the reason
// when the build has no CUDA or no usable device. SpindleKV evicts only at the prompt, so its
// decode steps run without an observer: the decoder hands each block to the device's books
// (DeviceKvMirror's codebooks, device_kv_codebook.h) and no row comes to the host until it is
// asked for. Against a decoder whose watcher keeps the host appended (the host matches every row
// itself, KVCache::append): the same logits at every step, exactly (both attend the same stored
// words), and once synced the same codebooks (codes, indices, norms, positions) and a device cache
// equal to its host's reconstruction. The CPU proof with the twin: device_kv_mirror_codebook_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "device_kv_decoder_gpu_check.h"
#include "device_kv_gpu_test_util.h"
#include "device_kv_mirror_rig.h"
#include "dsl/policy_loader.h"
#include "prompt_end_stage_cases.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/device_kv_cache.h"
#endif

namespace kvevict {
namespace {


TEST(DeviceKvCodebookDecoderGpu, SpindleKVDecodeRowsAreMatchedOnTheDevice) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  WatchOnly watch;
  const auto model = make_random_model(test::gqa_test_config("device-codebook-test"), 41);
  std::mt19937 rng(3);
  std::vector<int> prompt(120);
  for (int& t : prompt) t = static_cast<int>(rng() % 300);
  for (const std::string scope : {"per_head", "per_layer_across_heads"})
    for (KvType type : {KvType::F16, KvType::F32}) {
      const std::string what = scope + ", " + kv_type_name(type);
      const auto policy = load_policy("spindlekv", {{"codebook_scope", scope}});
      auto deferred = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
      auto appended = make_decoder(*model, DecoderDevice::Cuda, {.kv_type = type});
      EvictionEngine e1(*policy, model->config, {Budget::parse("50%"), 0});
      EvictionEngine e2(*policy, model->config, {Budget::parse("50%"), 0});
      ASSERT_FALSE(e1.observes_decode()) << "spindlekv evicts at the prompt only";
      std::vector<float> a = deferred->forward(prompt, &e1), b = appended->forward(prompt, &e2);
      const int64_t read_before = deferred->device_kv_stats().counts.rows_read;
      for (int s = 0; s < 12; ++s) {
        ASSERT_EQ(a, b) << what << ", step " << s;
        const int next = static_cast<int>(std::max_element(a.begin(), a.end()) - a.begin());
        a = deferred->forward(std::vector<int>{next});
        b = appended->forward(std::vector<int>{next}, &watch);
      }
      ASSERT_EQ(a, b) << what;
      const DeviceKvCounts counts = deferred->device_kv_stats().counts;
      EXPECT_EQ(counts.rows_read, read_before) << what << ": no row came to the host in the decode loop";
      EXPECT_EQ(counts.codebook_rows_on_device, int64_t{12} * model->config.n_layers * model->config.n_kv_heads)
          << what;
      EXPECT_EQ(appended->device_kv_stats().counts.codebook_rows_on_device, 0) << what;
      ASSERT_TRUE(device_equals_host(*deferred)) << what;  // cache(): the host catches up
      ASSERT_TRUE(device_equals_host(*appended)) << what;
      EXPECT_TRUE(same_codebooks(deferred->cache(), appended->cache())) << what;
    }
#endif
}

// SpindleKV's prompt (and ThinK's, whose key-channel stage also runs at the prompt's end),
// announced (prefill_prompt), reads no row during its calls: the CUDA decoder leaves the prompt's
// rows on the device (placeholder host rows) and brings only the kept rows to the host at the
// prompt's end for the stage (ObservationRequest::host_rows_at_prompt_end). Against the same prompt
// unannounced (its calls read their rows on the host, as before): the same logits, kept positions,
// codebooks or pruned channels, and decode steps; fewer rows read back than the prompt holds.
// CPU proof: RowlessEngineTurnTest.StagesAtThePromptsEndReadTheKeptRowsBroughtBack.
TEST(DeviceKvCodebookDecoderGpu, PromptsWithAStageAtTheirEndLeaveTheirRowsOnTheDevice) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  const auto model = make_random_model(test::gqa_test_config("device-codebook-test"), 41);
  const ModelConfig& c = model->config;
  std::mt19937 rng(5);
  std::vector<int> prompt(120);
  for (int& t : prompt) t = static_cast<int>(rng() % 300);
  for (const test::PromptEndStageCase& stage : test::prompt_end_stage_cases()) {
    const std::string& what = stage.label;
    const auto policy = load_policy(stage.policy, stage.params);
    auto announced = make_decoder(*model, DecoderDevice::Cuda, {});
    auto plain = make_decoder(*model, DecoderDevice::Cuda, {});
    EvictionEngine e1(*policy, c, {Budget::parse("50%"), 0});
    EvictionEngine e2(*policy, c, {Budget::parse("50%"), 0});
    std::vector<float> a = prefill_prompt(*announced, prompt, &e1, &e1);
    std::vector<float> b = plain->forward(prompt, &e2);
    ASSERT_EQ(a, b) << what;
    const DeviceKvCounts ca = announced->device_kv_stats().counts, cb = plain->device_kv_stats().counts;
    EXPECT_GT(ca.rows_placeholder, 0) << what << ": the announced prompt's rows stayed on the device";
    EXPECT_EQ(cb.rows_placeholder, 0) << what << ": the unannounced prompt's rows came to the host";
    int64_t kept = 0;
    for (const auto& layer : e1.report().layers)
      for (const HeadReport& h : layer) kept += h.kept;
    EXPECT_EQ(ca.rows_read, kept) << what << ": only the kept rows came back, once";
    EXPECT_LT(kept, static_cast<int64_t>(prompt.size()) * c.n_layers * c.n_kv_heads) << what;
    ASSERT_EQ(e1.report().layers.size(), e2.report().layers.size());
    for (size_t l = 0; l < e1.report().layers.size(); ++l)
      for (size_t h = 0; h < e1.report().layers[l].size(); ++h)
        EXPECT_EQ(e1.report().layers[l][h].kept_positions, e2.report().layers[l][h].kept_positions)
            << what << ", layer " << l << " head " << h;
    EXPECT_GT(e1.report().key_codes + e1.report().pruned_key_channels, 0) << what << ": the stage ran";
    EXPECT_EQ(e1.report().key_codes, e2.report().key_codes) << what;
    EXPECT_EQ(e1.report().value_codes, e2.report().value_codes) << what;
    EXPECT_EQ(e1.report().pruned_key_channels, e2.report().pruned_key_channels) << what;
    for (int s = 0; s < 8; ++s) {
      const int next = static_cast<int>(std::max_element(a.begin(), a.end()) - a.begin());
      a = announced->forward(std::vector<int>{next});
      b = plain->forward(std::vector<int>{next});
      ASSERT_EQ(a, b) << what << ", step " << s;
    }
    ASSERT_TRUE(device_equals_host(*announced)) << what;
    ASSERT_TRUE(device_equals_host(*plain)) << what;
    if (e1.report().key_codes > 0) {
      EXPECT_TRUE(same_codebooks(announced->cache(), plain->cache())) << what;
    }
  }
#endif
}

}  // namespace
}  // namespace kvevict
