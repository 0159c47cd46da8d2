// FlashInfer's prefill attention (core/decode/cuda/flashinfer_prefill.h) against our own ragged
// kernel and the double reference, and the CUDA decoder with it against the decoder with the own
// kernel. The refusals are host logic and run everywhere the CUDA backend is built; the rest needs
// a GPU and a build with FlashInfer (-DKVEVICT_FLASHINFER_DIR) and skips with the reason otherwise.
//
// Tolerance. FlashInfer reads the queries rounded to the cache's 16-bit type and writes its output
// in that type; the own kernel keeps both in f32. A query rounded to f16 has a relative error of
// 2^-11 (4.9e-4) per element, so a score q.k / sqrt(d) of magnitude s moves by about
// 4.9e-4 * |s| (the rounding errors of the d products add incoherently, well below this bound);
// with the test's scores |s| < 6 a softmax weight moves by at most about e^0.003 - 1 = 0.3%, and
// the f16 output adds 4.9e-4 relative; FlashInfer also rounds the softmax weights P to 16 bits
// before the P.V product, another 4.9e-4 relative per weight. 1e-2 * (1 + |ref|) holds that with
// 3x margin. BF16 has 2^-8 (3.9e-3) per element, eight times f16: 8e-2 * (1 + |ref|). A CPU emulation
// of that rounding (q, P and the output in 16 bits) on this test's seeds (review, 2026-12-06) gave
// at most 1.0e-3 (F16) and 6.1e-3 (BF16), about 10x inside the bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/decode/ragged_attention_twin.h"
#include "core/util/error.h"
#include "gpu_test_skip.h"
#include "ragged_attention_test_layer.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/flashinfer_prefill.h"
#include "core/decode/cuda/ragged_attention.h"
#include "core/model/synthetic_model.h"
#include "device_kv_gpu_test_util.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

#define SKIP_WITHOUT_FLASHINFER()                                                                             \
  do {                                                                                                        \
    if (!cuda::flashinfer_prefill_built())                                                                    \
      GTEST_SKIP() << "this build has no FlashInfer (scripts/fetch-flashinfer.sh, cmake -DKVEVICT_FLASHINFER_DIR)"; \
  } while (0)

double tolerance(KvType type) { return type == KvType::BF16 ? 8e-2 : 1e-2; }

// max |got - want| / (1 + |want|).
double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    const double err = std::abs(double(got[e]) - want[e]) / (1.0 + std::abs(want[e]));
    worst = std::max(worst, std::isfinite(got[e]) ? err : INFINITY);
  }
  return worst;
}

DeviceKvLayerView layer_view(KvType type, int head_dim, std::vector<int64_t> lengths) {
  DeviceKvLayerView v;
  v.type = type;
  v.head_dim = head_dim;
  v.n_heads = int(lengths.size());
  int64_t row = 0;
  for (int h = 0; h < v.n_heads; ++h) v.base_row[h] = row, v.length[h] = lengths[size_t(h)], row += lengths[size_t(h)];
  return v;
}

TEST(FlashInferPrefill, AppliesOnlyToWhatItWasBuiltFor) {
  const bool built = cuda::flashinfer_prefill_built();
  EXPECT_EQ(cuda::flashinfer_prefill_applies(layer_view(KvType::F16, 64, {40, 900}), 40), built);
  EXPECT_EQ(cuda::flashinfer_prefill_applies(layer_view(KvType::BF16, 128, {7, 7}), 7), built);
  EXPECT_FALSE(cuda::flashinfer_prefill_applies(layer_view(KvType::F32, 64, {40, 900}), 40));  // 16-bit only
  EXPECT_FALSE(cuda::flashinfer_prefill_applies(layer_view(KvType::F16, 80, {40, 900}), 40));  // not instantiated
  EXPECT_FALSE(cuda::flashinfer_prefill_applies(layer_view(KvType::F16, 64, {39, 900}), 40));  // a head without its block
  EXPECT_FALSE(cuda::flashinfer_prefill_applies(layer_view(KvType::F16, 64, {40, 900}), 0));
  // A call that does not apply is refused before anything reaches the device.
  EXPECT_THROW(cuda::flashinfer_prefill(layer_view(KvType::F32, 64, {4}), 4, 2, nullptr, nullptr, nullptr, 0),
               UsageError);
}

TEST(FlashInferPrefill, TheDecoderRefusesItWhereItCannotRun) {
  ModelConfig c = test::gqa_test_config("flashinfer-refusals");  // head_dim 16: never instantiated
  const auto model = make_random_model(c, 3);
  DecoderOptions o;
  o.prefill_attention = PrefillAttention::FlashInfer;
  // Refused before any CUDA call: no GPU needed.
  EXPECT_THROW(make_cuda_decoder(*model, o), UsageError);
}

// The same layer through FlashInfer and through the own kernel (and the double reference).
void check_against_own_kernel(KvType type, int group, int head_dim, int n, std::vector<int64_t> lengths,
                              uint32_t seed, double* worst_seen) {
  const std::string where = std::string(kv_type_name(type)) + " group " + std::to_string(group) + " head_dim " +
                            std::to_string(head_dim) + " n " + std::to_string(n);
  const ragged_test::Layer L = ragged_test::random_layer(type, head_dim, lengths, seed);
  const int n_heads = L.view.n_heads * group;
  const auto q = ragged_test::random_queries(n, n_heads, head_dim, 1.5f, seed + 1);
  cuda::DeviceArray<uint16_t> keys, values;
  keys.upload(L.keys);
  values.upload(L.values);
  DeviceKvLayerView view = L.view;
  view.keys = keys.data();
  view.values = values.data();
  ASSERT_TRUE(cuda::flashinfer_prefill_applies(view, n)) << where;
  cuda::DeviceArray<float> dq, own(q.size()), flash(q.size());
  dq.upload(q);
  const RaggedAttentionPlan plan = plan_ragged_attention(view, n, group);
  cuda::DeviceArray<float> workspace(std::max<size_t>(plan.workspace_floats, 1));
  cuda::ragged_attention(view, plan, dq.data(), own.data(), nullptr, nullptr, workspace.data(), workspace.size());
  cuda::DeviceArray<uint16_t> staging(2 * cuda::flashinfer_prefill_staging_elements(view, n, group));
  cuda::flashinfer_prefill(view, n, group, dq.data(), flash.data(), staging.data(), staging.size());
  std::vector<float> own_host(q.size()), flash_host(q.size());
  own.download(own_host.data(), own_host.size());
  flash.download(flash_host.data(), flash_host.size());
  const double err = worst_error(flash_host, own_host);
  EXPECT_LE(err, tolerance(type)) << where << ": FlashInfer vs the own kernel";
  const ragged_test::Reference ref = ragged_test::reference(L, q, n, group);
  EXPECT_LE(worst_error(flash_host, std::vector<float>(ref.out.begin(), ref.out.end())), tolerance(type))
      << where << ": FlashInfer vs the reference";
  *worst_seen = std::max(*worst_seen, err);
}

TEST(FlashInferPrefillGpu, MatchesTheOwnKernelOnRaggedHeads) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_FLASHINFER();
  uint32_t seed = 7;
  double worst = 0;
  for (KvType type : {KvType::F16, KvType::BF16})
    for (int group : {1, 4})
      for (int hd : {64, 128})
        for (int n : {2, 37, 300}) {
          // Heads of different lengths, each holding at least its n block entries.
          check_against_own_kernel(type, group, hd, n, {n, int64_t(n) + 5, int64_t(n) + 700, int64_t(n) + 1500}, seed++,
                                   &worst);
        }
  std::printf("[ kvevict  ] FlashInfer vs the own kernel: worst relative difference %.3g\n", worst);
  // The two really differ (16-bit queries and outputs): the comparison ran FlashInfer's kernel.
  EXPECT_GT(worst, 0.0);
}

// A head_dim FlashInfer takes (64), GQA, two layers: whole-prompt prefill, then a second block on
// the cache the first one left, then decode steps (which always take the own kernel).
ModelConfig flashinfer_config() {
  ModelConfig c = test::gqa_test_config("flashinfer-decoder");
  c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64, c.dim = 256, c.hidden_dim = 384;
  return c;
}

TEST(FlashInferPrefillGpu, TheDecoderGivesTheOwnKernelsLogits) {
  SKIP_WITHOUT_GPU();
  SKIP_WITHOUT_FLASHINFER();
  const auto model = make_random_model(flashinfer_config(), 11);
  std::vector<int> prompt(300), second(60);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int((i * 37 + 5) % model->config.vocab_size);
  for (size_t i = 0; i < second.size(); ++i) second[i] = int((i * 53 + 9) % model->config.vocab_size);
  for (KvType type : {KvType::F16, KvType::BF16}) {
    DecoderOptions own_options, flash_options;
    own_options.kv_type = flash_options.kv_type = type;
    flash_options.prefill_attention = PrefillAttention::FlashInfer;
    const auto own = make_cuda_decoder(*model, own_options);
    const auto flash = make_cuda_decoder(*model, flash_options);
    float worst = 0;
    for (const std::vector<int>* block : {&prompt, &second}) {
      const std::vector<float> a = own->forward(*block), b = flash->forward(*block);
      EXPECT_LE(test::max_abs_diff(a, b), test::logit_bound(a)) << kv_type_name(type);
      worst = std::max(worst, test::max_abs_diff(a, b));
    }
    const int next = 1;
    const std::vector<float> a = own->forward(std::span<const int>(&next, 1)),
                             b = flash->forward(std::span<const int>(&next, 1));
    EXPECT_LE(test::max_abs_diff(a, b), test::logit_bound(a)) << kv_type_name(type) << " decode";
    EXPECT_GT(worst, 0.0f) << kv_type_name(type) << ": the FlashInfer decoder must differ (it rounds q to 16 bits)";
  }
}

#endif  // KVEVICT_HAVE_CUDA

}  // namespace
}  // namespace kvevict
