// The decoder on weights in their file format (WeightStorage::Native) against the f32 reference
// path (WeightStorage::F32) on the same file: tiny GGUF models of every supported type, stories260K
// (f32 on disk: both storages must give identical logits) and SmolLM2 Q4_1 (greedy agreement).
// Bounds are justified in docs/PERFORMANCE.md ("Quantised weights: accuracy").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/decode/decoder.h"
#include "core/model/ggml_types.h"
#include "core/model/model.h"
#include "gguf_writer.h"
#include "test_models.h"

namespace kvevict {
namespace {

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}
float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}
int argmax(const float* v, int n) { return static_cast<int>(std::max_element(v, v + n) - v); }

struct TypeCase {
  uint32_t type;
  float decode_tolerance;  // max |logit difference| / max |logit| on one-token steps
};

class QuantDecoder : public ::testing::TestWithParam<TypeCase> {};

// Prefill reads dequantised tiles through sgemm (f32 rounding only); decode steps read the blocks
// with the 8-bit activation (its rounding, compounded over the layers, bounds the difference).
TEST_P(QuantDecoder, LogitsMatchTheF32Path) {
  const TypeCase& c = GetParam();
  test::TinyLlama spec;
  spec.dim = 256;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.head_dim = 64;
  spec.hidden_dim = 256;
  spec.weight_type = c.type;
  spec.tied = false;
  spec.seed = 40 + c.type;
  const std::string path = (std::filesystem::temp_directory_path() / ("kvevict_quant_" + ggml_type_name(c.type) + ".gguf")).string();
  spec.writer().write(path);
  const auto native = load_model(path, {.tokenizer_path = {}, .weights = WeightStorage::Native});
  const auto f32 = load_model(path, {.tokenizer_path = {}, .weights = WeightStorage::F32});
  std::remove(path.c_str());
  ASSERT_TRUE(native->weights.has_native());
  EXPECT_TRUE(native->weights.layers[0].wq.empty()) << "no f32 copy of a native matrix";
  EXPECT_FALSE(f32->weights.has_native());
  EXPECT_EQ(native->weights.native_layers[1].w_down.type, c.type);

  auto dn = make_cpu_decoder(*native, {.threads = 2});
  auto df = make_cpu_decoder(*f32, {.threads = 2});
  const std::vector<int> prompt = {1, 40, 77, 120, 3, 200};
  std::vector<float> all_n, all_f;
  dn->forward(prompt, nullptr, &all_n);
  df->forward(prompt, nullptr, &all_f);
  EXPECT_LE(max_diff(all_n, all_f), 1e-4f * max_abs(all_f) + 1e-5f) << "prefill";
  const int vocab = native->config.vocab_size;
  int token = argmax(all_f.data() + all_f.size() - vocab, vocab);
  for (int step = 0; step < 4; ++step) {
    const std::vector<int> one = {token};
    const std::vector<float> ln = dn->forward(one);
    const std::vector<float> lf = df->forward(one);
    EXPECT_LE(max_diff(ln, lf), c.decode_tolerance * max_abs(lf)) << "decode step " << step;
    token = argmax(lf.data(), vocab);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantDecoder,
                         // Quantised formats: the tiny models have random weights, so every product is of
                         // near-orthogonal 256-vectors and the 8-bit rounding (<= 0.4% of sum |w x|) is
                         // several percent of the product itself, compounded over 2 layers and the
                         // classifier; measured worst 11% of the largest logit. F16/BF16: f32 rounding.
                         ::testing::Values(TypeCase{1, 1e-4f}, TypeCase{30, 1e-4f}, TypeCase{2, 0.2f}, TypeCase{3, 0.2f},
                                           TypeCase{8, 0.2f}, TypeCase{12, 0.2f}, TypeCase{14, 0.2f}),
                         [](const auto& info) { return ggml_type_name(info.param.type); });

// llama2.c checkpoints are f32 on disk: both storages are the f32 path and give identical logits.
TEST(QuantDecoderStories, NativeAndF32AreIdentical) {
  if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto a = load_model(test::stories_checkpoint(), {.tokenizer_path = test::stories_tokenizer(), .weights = WeightStorage::Native});
  const auto b = load_model(test::stories_checkpoint(), {.tokenizer_path = test::stories_tokenizer(), .weights = WeightStorage::F32});
  EXPECT_FALSE(a->weights.has_native());
  auto da = make_cpu_decoder(*a), db = make_cpu_decoder(*b);
  std::vector<int> tokens = {1};
  for (int step = 0; step < 16; ++step) {
    const std::vector<float> la = da->forward(std::vector<int>{tokens.back()});
    const std::vector<float> lb = db->forward(std::vector<int>{tokens.back()});
    ASSERT_EQ(la, lb) << "step " << step;
    tokens.push_back(argmax(la.data(), static_cast<int>(la.size())));
  }
}

// SmolLM2 Q4_1: greedy decoding on the native weights (quantised matvec) against the f32 path
// teacher-forced over the same tokens. Where the f32 path's top two logits are further apart than
// kClearMargin the native argmax must agree; closer pairs are near-ties and only counted.
TEST(QuantDecoderSmolLM2, GreedyAgreesExceptAtNearTies) {
  const std::string path = test::smollm2_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "SmolLM2 not found at " << path;
  constexpr float kClearMargin = 0.5f;
  constexpr int kSteps = 32;
  const auto native = load_model(path, {.tokenizer_path = {}, .weights = WeightStorage::Native});
  const auto f32 = load_model(path, {.tokenizer_path = {}, .weights = WeightStorage::F32});
  const int vocab = native->config.vocab_size;
  int agree = 0, total = 0, near_ties = 0;
  float worst = 0;  // max |logit difference| / max(1, top logit)
  for (const char* text : {"The capital of France is", "Once upon a time, a little robot", "def fibonacci(n):"}) {
    std::vector<int> tokens = native->tokenizer->encode(text, /*add_bos=*/false);
    const size_t prompt = tokens.size();
    auto dn = make_cpu_decoder(*native, {.threads = 2});
    std::vector<float> logits = dn->forward(tokens);
    std::vector<std::vector<float>> steps;
    for (int s = 0; s < kSteps; ++s) {
      tokens.push_back(argmax(logits.data(), vocab));
      steps.push_back(logits);
      if (s + 1 < kSteps) logits = dn->forward(std::vector<int>{tokens.back()});
    }
    auto df = make_cpu_decoder(*f32, {.threads = 2});
    std::vector<float> all;
    df->forward(std::span<const int>(tokens.data(), tokens.size() - 1), nullptr, &all);
    for (int s = 0; s < kSteps; ++s) {
      const float* lf = all.data() + (prompt - 1 + s) * vocab;
      const int want = argmax(lf, vocab);
      std::vector<float> sorted(lf, lf + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const bool tie = sorted[0] - sorted[1] < kClearMargin;
      const int got = argmax(steps[s].data(), vocab);
      for (int i = 0; i < vocab; ++i) worst = std::max(worst, std::fabs(steps[s][i] - lf[i]) / std::max(1.0f, std::fabs(sorted[0])));
      ++total;
      agree += got == want;
      near_ties += tie;
      if (!tie) {
        EXPECT_EQ(got, want) << "'" << text << "' step " << s << " margin " << sorted[0] - sorted[1];
      }
    }
  }
  std::printf("SmolLM2 Q4_1 native vs f32 greedy: %d / %d steps agree (%d near-ties under %.1f); worst logit "
              "difference %.4f of the top logit\n", agree, total, near_ties, kClearMargin, worst);
  // Not a derived bound: a regression guard at about 1.5x the measured 0.19 (SmolLM2's outlier
  // channels make some 32-value blocks' scales large, so the 8-bit rounding of the rest is coarse;
  // llama.cpp rounds the same way). The per-product bound is checked exactly in quant_dot_test.
  EXPECT_LT(worst, 0.3f);
}

}  // namespace
}  // namespace kvevict
