// The CPU decoder against the naive double-precision reference (reference_forward.h) on random
// models of many geometries: GQA ratios 1-4, head dims that are not powers of two, both RoPE
// conventions, rope scaling, q/k/v bias, untied output; one-block prefill against token-by-token.
#include <gtest/gtest.h>

#include <random>

#include "core/decode/decoder.h"
#include "core/model/synthetic_model.h"
#include "reference_forward.h"

namespace kvevict {
namespace {

ModelConfig small_config(int n_heads, int n_kv_heads, int head_dim) {
  ModelConfig c;
  c.name = "test";
  c.n_layers = 2;
  c.dim = 40;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.hidden_dim = 56;
  c.vocab_size = 300;
  c.context_length = 512;
  c.rope_theta = 10000.0f;
  return c;
}

std::vector<int> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& v : t) v = static_cast<int>(rng() % vocab);
  return t;
}

// Largest |a - b| relative to max(1, |b|).
double max_error(const float* got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  return worst;
}

void expect_matches_reference(const ModelConfig& config, int n_tokens) {
  const auto model = make_random_model(config, 42);
  const auto tokens = random_tokens(n_tokens, config.vocab_size, 7);
  const auto ref = test::reference_forward(*model, tokens);

  auto block = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  std::vector<float> all;
  block->forward(tokens, nullptr, &all);
  for (int t = 0; t < n_tokens; ++t) {
    ASSERT_LT(max_error(all.data() + size_t(t) * config.vocab_size, ref.logits[t]), 1e-4) << "block, token " << t;
  }
  auto stepwise = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  for (int t = 0; t < n_tokens; ++t) {
    const auto& logits = stepwise->forward(std::span<const int>(&tokens[t], 1));
    ASSERT_LT(max_error(logits.data(), ref.logits[t]), 1e-4) << "token-by-token, token " << t;
    for (int v = 0; v < config.vocab_size; ++v) {
      ASSERT_NEAR(logits[v], all[size_t(t) * config.vocab_size + v], 1e-4) << "token " << t;
    }
  }
}

struct Geometry {
  int heads, kv_heads, head_dim;
};
class GqaGeometry : public ::testing::TestWithParam<Geometry> {};

TEST_P(GqaGeometry, BlockAndStepwiseMatchTheReference) {
  const Geometry g = GetParam();
  // 300 tokens: several 128-query tiles and 256-key blocks.
  expect_matches_reference(small_config(g.heads, g.kv_heads, g.head_dim), 300);
}

INSTANTIATE_TEST_SUITE_P(Ratios, GqaGeometry,
                         ::testing::Values(Geometry{4, 4, 8}, Geometry{4, 2, 6}, Geometry{6, 2, 10}, Geometry{8, 2, 12},
                                           Geometry{3, 1, 14}, Geometry{9, 3, 64}),
                         [](const auto& info) {
                           return "q" + std::to_string(info.param.heads) + "_kv" + std::to_string(info.param.kv_heads) +
                                  "_d" + std::to_string(info.param.head_dim);
                         });

TEST(CpuDecoder, HalfSplitRopeBiasAndUntiedOutput) {
  ModelConfig c = small_config(6, 3, 10);
  c.rope_style = RopeStyle::HalfSplit;
  c.qkv_bias = true;
  c.tied_embeddings = false;
  expect_matches_reference(c, 20);
}

TEST(CpuDecoder, LinearRopeScaling) {
  ModelConfig c = small_config(4, 2, 8);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0f;
  expect_matches_reference(c, 20);
}

TEST(CpuDecoder, Llama3RopeScaling) {
  ModelConfig c = small_config(4, 1, 16);
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0f;
  c.rope_scaling.original_max_position = 64;  // small, so all three frequency bands occur
  expect_matches_reference(c, 20);
}

TEST(CpuDecoder, ContinuesAfterAPrefilledBlock) {
  // A second multi-token block attends over the cache plus causally over itself.
  const ModelConfig c = small_config(6, 2, 10);
  const auto model = make_random_model(c, 3);
  const auto tokens = random_tokens(90, c.vocab_size, 11);
  const auto ref = test::reference_forward(*model, tokens);
  auto d = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  d->forward(std::span<const int>(tokens.data(), 20));
  std::vector<float> all;
  d->forward(std::span<const int>(tokens.data() + 20, 70), nullptr, &all);
  for (int t = 20; t < 90; ++t) {
    ASSERT_LT(max_error(all.data() + size_t(t - 20) * c.vocab_size, ref.logits[t]), 1e-4) << "token " << t;
  }
  EXPECT_EQ(d->position(), 90);
  EXPECT_EQ(d->cache().length(1, 1), 90);
}

TEST(CpuDecoder, RejectsBadTokens) {
  const auto model = make_synthetic_model("synthetic:tiny");
  auto d = make_cpu_decoder(*model, {.kv_type = KvType::F32});
  std::vector<int> bad = {5, model->config.vocab_size};
  EXPECT_THROW(d->forward(bad), std::out_of_range);
  EXPECT_THROW(d->forward(std::vector<int>{}), std::invalid_argument);
  EXPECT_EQ(d->position(), 0);
}

TEST(CpuDecoder, ResetEmptiesTheCache) {
  const auto model = make_synthetic_model("synthetic:tiny");
  auto d = make_cpu_decoder(*model, {.kv_type = KvType::F32});
  const auto tokens = random_tokens(10, model->config.vocab_size, 1);
  const std::vector<float> first = d->forward(tokens);
  d->reset();
  EXPECT_EQ(d->position(), 0);
  EXPECT_EQ(d->cache().total_entries(), 0);
  EXPECT_EQ(d->forward(tokens), first);
}

}  // namespace
}  // namespace kvevict

namespace kvevict {
namespace {

// Big enough that matmuls and attention take their multithreaded paths (small ones stay serial),
// including ragged heads in the parallel decode kernel.
TEST(CpuDecoder, ParallelPathsMatchTheReference) {
  ModelConfig c = small_config(6, 2, 64);
  c.dim = 128;
  c.hidden_dim = 256;
  c.n_layers = 1;
  const auto model = make_random_model(c, 8);
  const auto tokens = random_tokens(600, c.vocab_size, 3);
  std::vector<int> kept;
  for (int i = 0; i < 599; i += 3) kept.push_back(i);
  const auto ref = test::reference_forward(*model, tokens, [&](int, int kv, int q, int k) {
    return q < 599 || kv == 0 || k % 3 == 0 || k == 599;
  });
  auto d = make_cpu_decoder(*model, {.threads = 2, .kv_type = KvType::F32});
  std::vector<float> all;
  d->forward(std::span<const int>(tokens.data(), 599), nullptr, &all);
  for (int t : {0, 63, 64, 300, 598}) {
    ASSERT_LT(max_error(all.data() + size_t(t) * c.vocab_size, ref.logits[t]), 1e-4) << "token " << t;
  }
  d->cache().keep(0, 1, kept);  // KV head 1 now shorter than KV head 0
  const auto& last = d->forward(std::span<const int>(&tokens[599], 1));
  EXPECT_LT(max_error(last.data(), ref.logits[599]), 1e-4);
}

}  // namespace
}  // namespace kvevict
