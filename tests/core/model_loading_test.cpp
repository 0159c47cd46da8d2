// Loading: llama2.c checkpoints written by the test (untied classifier, truncation, hostile
// headers), the load_model dispatch, and the synthetic models.
#include <gtest/gtest.h>

#include <fstream>

#include "core/decode/decoder.h"
#include "core/decode/sampler.h"
#include "core/model/model.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"
#include "llama2c_writer.h"
#include "reference_forward.h"
#include "test_models.h"

namespace kvevict {
namespace {

void expect_model_error_naming(const std::string& path, const std::string& fragment) {
  try {
    load_model(path);
    FAIL() << "expected a ModelError for " << path;
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Llama2cLoader, UntiedClassifierRoundTrips) {
  ModelConfig c = test::llama2c_config();
  c.tied_embeddings = false;
  const auto original = make_random_model(c, 3);
  const std::string path = test::write_llama2c(*original, "untied", true);
  const auto loaded = load_model(path);
  EXPECT_EQ(loaded->info.format, "llama2c");
  EXPECT_FALSE(loaded->config.tied_embeddings);
  EXPECT_EQ(loaded->weights.output, original->weights.output);
  EXPECT_EQ(loaded->weights.layers[1].w_down, original->weights.layers[1].w_down);
  EXPECT_EQ(loaded->weights.layers[1].w_up, original->weights.layers[1].w_up);
  const std::vector<int> tokens = {1, 200, 17, 299};
  const auto ref = test::reference_forward(*original, tokens);
  auto d = make_cpu_decoder(*loaded, {.kv_type = KvType::F32});
  std::vector<float> all;
  d->forward(tokens, nullptr, &all);
  for (int v = 0; v < c.vocab_size; ++v) EXPECT_NEAR(all[3 * c.vocab_size + v], ref.logits[3][v], 1e-4);
}

TEST(Llama2cLoader, TruncatedAndOversizedFilesAreRejected) {
  const auto original = make_random_model(test::llama2c_config(), 4);
  const std::string path = test::write_llama2c(*original, "truncated", false);
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 4);
  expect_model_error_naming(path, "does not match the header");
  std::filesystem::resize_file(path, size + 8);
  expect_model_error_naming(path, "does not match the header");
  std::filesystem::resize_file(path, 10);
  expect_model_error_naming(path, "truncated");
}

TEST(Llama2cLoader, HostileHeadersAreRejected) {
  const std::string path = ::testing::TempDir() + "/hostile.bin";
  auto write_header = [&](std::vector<int32_t> h) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(h.data()), h.size() * 4);
  };
  write_header({64, 172, 5, 8, 4, 512, 512});  // a real header with no tensors
  expect_model_error_naming(path, "does not match the header");
  write_header({1 << 30, 172, 5, 8, 4, 512, 512});
  expect_model_error_naming(path, "hidden size");
  write_header({64, 172, 5, 8, 3, 512, 512});
  expect_model_error_naming(path, "multiple of KV heads");
  write_header({64, 172, -5, 8, 4, 512, 512});
  expect_model_error_naming(path, "layer count");
  write_header({64, 172, 5, 8, 4, INT32_MIN, 512});
  expect_model_error_naming(path, "vocab");
  write_header({60, 172, 5, 8, 4, 512, 512});
  expect_model_error_naming(path, "multiple of n_heads");
}

TEST(Llama2cLoader, MissingTokenizerIsAModelError) {
  const auto original = make_random_model(test::llama2c_config(), 4);
  const std::string path = test::write_llama2c(*original, "no-tokenizer", false);
  std::filesystem::remove(std::filesystem::path(path).parent_path() / "tokenizer.bin");
  expect_model_error_naming(path, "--tokenizer");
  LoadOptions options;
  options.tokenizer_path = std::filesystem::path(path).parent_path() / "nonexistent.bin";
  EXPECT_THROW(load_model(path, options), InputError);  // a named file that is missing: exit 2 too
}

TEST(LoadModel, MissingPathNamesIt) {
  try {
    load_model("/nonexistent/model.bin");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.bin: cannot open model file: No such file"), std::string::npos)
        << e.what();
  }
}

TEST(SyntheticModels, NamedGeometries) {
  const ModelConfig smol = synthetic_config("smollm2-135m");
  EXPECT_EQ(smol.n_layers, 30);
  EXPECT_EQ(smol.dim, 576);
  EXPECT_EQ(smol.n_heads, 9);
  EXPECT_EQ(smol.n_kv_heads, 3);
  EXPECT_EQ(smol.head_dim, 64);
  EXPECT_EQ(smol.hidden_dim, 1536);
  EXPECT_EQ(smol.vocab_size, 49152);
  EXPECT_FLOAT_EQ(smol.rope_theta, 1e5f);
  const ModelConfig big = synthetic_config("llama-8b");
  EXPECT_EQ(big.n_layers, 32);
  EXPECT_EQ(big.dim, 4096);
  EXPECT_EQ(big.n_heads, 32);
  EXPECT_EQ(big.n_kv_heads, 8);
  EXPECT_EQ(big.head_dim, 128);
  EXPECT_EQ(big.hidden_dim, 14336);
  EXPECT_EQ(big.vocab_size, 128256);
  EXPECT_FLOAT_EQ(big.rope_theta, 5e5f);
  EXPECT_EQ(big.context_length, 8192);
  const ModelConfig long_ctx = synthetic_config("llama3.1-8b");  // the same geometry, 128K through llama3 RoPE
  EXPECT_EQ(long_ctx.n_layers, big.n_layers);
  EXPECT_EQ(long_ctx.kv_dim(), big.kv_dim());
  EXPECT_EQ(long_ctx.hidden_dim, big.hidden_dim);
  EXPECT_EQ(long_ctx.context_length, 131072);
  EXPECT_EQ(long_ctx.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(long_ctx.rope_scaling.factor, 8.0f);
  EXPECT_EQ(long_ctx.name, "synthetic:llama3.1-8b");
  EXPECT_THROW(synthetic_config("nope"), UsageError);
  EXPECT_THROW(make_synthetic_model("synthetic:tiny:abc"), UsageError);
}

TEST(SyntheticModels, SeedDeterminesTheWeights) {
  const auto a = load_model("synthetic:tiny:5");
  const auto b = load_model("synthetic:tiny:5");
  const auto c = load_model("synthetic:tiny:6");
  EXPECT_EQ(a->weights.layers[1].wq, b->weights.layers[1].wq);
  EXPECT_NE(a->weights.layers[1].wq, c->weights.layers[1].wq);
  EXPECT_EQ(a->info.format, "synthetic");
  // Activations stay sane: logits finite and of moderate size.
  auto d = make_cpu_decoder(*a, {.kv_type = KvType::F32});
  const auto& logits = d->forward(a->tokenizer->encode("hello world", true));
  float biggest = 0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    biggest = std::max(biggest, std::abs(v));
  }
  EXPECT_LT(biggest, 50.0f);
  EXPECT_GT(biggest, 0.1f);
}

TEST(Sampler, GreedyAndSeededTemperature) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f};
  Sampler greedy;
  EXPECT_EQ(greedy.sample(logits), 1);  // ties go to the lowest id
  Sampler a(1.0f, 42), b(1.0f, 42);
  std::vector<int> counts(4, 0);
  for (int i = 0; i < 20000; ++i) {
    const int x = a.sample(logits);
    EXPECT_EQ(x, b.sample(logits));
    ++counts[x];
  }
  double z = 0;
  for (float l : logits) z += std::exp(l);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / 20000.0, std::exp(logits[i]) / z, 0.02) << "id " << i;
  EXPECT_THROW(Sampler(-1.0f), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict
