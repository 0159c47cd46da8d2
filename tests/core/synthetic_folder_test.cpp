// A synthetic model written as a Hugging Face folder (core/model/synthetic_folder.h) loads back as
// the synthetic model: the same geometry (config.json through the real parser, RoPE scaling too),
// every tensor equal to the synthetic values rounded to the file's 16-bit type, a byte tokenizer
// with the synthetic ids, and the logits of the in-memory synthetic model (HalfSplit RoPE, as every
// HF checkpoint) within the weights' F16 rounding. Also: make_random_model and the folder draw from
// one list (synthetic_tensors), and a cut write leaves no loadable shard.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/decode/decoder.h"
#include "core/decode/kv_type_scalar.h"
#include "core/model/hf_config.h"
#include "core/model/model.h"
#include "core/model/synthetic_folder.h"
#include "core/model/synthetic_model.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir;
}

TEST(SyntheticFolder, LoadsBackAsTheSyntheticModelRoundedToItsType) {
  for (SyntheticFolderType type : {SyntheticFolderType::F16, SyntheticFolderType::BF16}) {
    const bool bf16 = type == SyntheticFolderType::BF16;
    ModelConfig c = synthetic_config("tiny");
    c.qkv_bias = false;
    const fs::path dir = fresh(bf16 ? "synthetic-folder-bf16" : "synthetic-folder-f16");
    const uint64_t bytes = write_synthetic_hf_folder(c, 5, dir.string(), type);
    EXPECT_EQ(bytes, fs::file_size(dir / "model.safetensors"));
    EXPECT_FALSE(fs::exists(dir / "model.safetensors.partial"));

    const auto loaded = load_model(dir.string(), {.weights = WeightStorage::F32});
    const ModelConfig& got = loaded->config;
    EXPECT_EQ(got.dim, c.dim);
    EXPECT_EQ(got.n_layers, c.n_layers);
    EXPECT_EQ(got.n_heads, c.n_heads);
    EXPECT_EQ(got.n_kv_heads, c.n_kv_heads);
    EXPECT_EQ(got.head_dim, c.head_dim);
    EXPECT_EQ(got.hidden_dim, c.hidden_dim);
    EXPECT_EQ(got.vocab_size, c.vocab_size);
    EXPECT_EQ(got.context_length, c.context_length);
    EXPECT_EQ(got.rope_theta, c.rope_theta);
    EXPECT_EQ(got.tied_embeddings, c.tied_embeddings);
    EXPECT_EQ(got.rope_style, RopeStyle::HalfSplit);

    // Every tensor: the synthetic values rounded to the file's type, bit for bit.
    auto rounded = [&](float x) {
      return bf16 ? kv_scalar::bf16_to_f32(kv_scalar::f32_to_bf16(x)) : kv_scalar::f16_to_f32(kv_scalar::f32_to_f16(x));
    };
    int tensors = 0;
    for (const SyntheticTensor& t : synthetic_tensors(c)) {
      const std::vector<float>& have = t.layer < 0 ? loaded->weights.*t.model_member
                                                   : loaded->weights.layers.at(t.layer).*t.layer_member;
      const std::vector<float> want = synthetic_values(t, 5);
      ASSERT_EQ(have.size(), want.size()) << t.hf_name;
      size_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i) differ += have[i] != rounded(want[i]);
      EXPECT_EQ(differ, 0u) << t.hf_name;
      ++tensors;
    }
    EXPECT_EQ(tensors, 2 + 9 * c.n_layers + (c.tied_embeddings ? 0 : 1));

    // The tokenizer's ids are the synthetic byte tokenizer's.
    EXPECT_EQ(loaded->tokenizer->encode("hi", false), (std::vector<int>{'h', 'i'}));
    EXPECT_EQ(loaded->tokenizer->bos_id(), 256);
    EXPECT_EQ(loaded->tokenizer->eos_id(), 257);

    // The same model as the in-memory one with HF's RoPE pairing, up to the weights' rounding.
    ModelConfig half = c;
    half.rope_style = RopeStyle::HalfSplit;
    const auto reference = make_random_model(half, 5);
    const std::vector<int> prompt = {1, 17, 200, 42, 99, 3};
    auto a = make_cpu_decoder(*loaded, {.threads = 1});
    auto b = make_cpu_decoder(*reference, {.threads = 1});
    const std::vector<float> la = a->forward(prompt), lb = b->forward(prompt);
    ASSERT_EQ(la.size(), lb.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < la.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(la[i]) - lb[i]));
      scale = std::max(scale, std::fabs(static_cast<double>(lb[i])));
    }
    // F16 keeps 11 significant bits (BF16 8): a relative rounding of 2^-11 (2^-8) per weight,
    // which a handful of layers carries to the logits at a few times that.
    EXPECT_LT(worst, (bf16 ? 0.05 : 0.01) * (1 + scale)) << "worst logit difference " << worst;
    EXPECT_GT(scale, 0.0);
  }
}

TEST(SyntheticFolder, ConfigTextCarriesTheRopeScalingOfTheLlama31Geometry) {
  const ModelConfig c = synthetic_config("llama3.1-8b");
  const fs::path dir = fresh("synthetic-config-only");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << hf_config_text(c, 256, 257, "float16");
  const ModelConfig got = parse_hf_config((dir / "config.json").string());
  EXPECT_EQ(got.context_length, 131072);
  EXPECT_EQ(got.rope_scaling.type, "llama3");
  EXPECT_EQ(got.rope_scaling.factor, 8.0f);
  EXPECT_EQ(got.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(got.rope_scaling.original_max_position, 8192);
  EXPECT_EQ(got.n_kv_heads, 8);
  EXPECT_EQ(got.hidden_dim, 14336);
  EXPECT_FALSE(got.tied_embeddings);
}

// make_random_model takes every tensor from synthetic_tensors: the values the folder writes.
TEST(SyntheticFolder, TheInMemoryModelDrawsFromTheSameList) {
  ModelConfig c = synthetic_config("tiny");
  c.qkv_bias = true;
  c.tied_embeddings = false;
  const auto m = make_random_model(c, 9);
  int64_t params = 0;
  for (const SyntheticTensor& t : synthetic_tensors(c)) {
    const std::vector<float>& have = t.layer < 0 ? m->weights.*t.model_member : m->weights.layers.at(t.layer).*t.layer_member;
    EXPECT_EQ(have, synthetic_values(t, 9)) << t.hf_name;
    params += static_cast<int64_t>(t.count());
  }
  EXPECT_EQ(m->info.n_params, params);
  EXPECT_FALSE(m->weights.layers[0].bq.empty());
  EXPECT_FALSE(m->weights.output.empty());
}

TEST(SyntheticFolder, AConfigItCannotWriteIsRefused) {
  ModelConfig c = synthetic_config("tiny");
  c.vocab_size = 200;  // below the tokenizer's BOS/EOS ids
  EXPECT_THROW(write_synthetic_hf_folder(c, 1, fresh("synthetic-small-vocab").string()), UsageError);
  c = synthetic_config("tiny");
  c.n_heads = 3;  // not a multiple of the KV heads: validate() refuses
  EXPECT_THROW(write_synthetic_hf_folder(c, 1, fresh("synthetic-bad-geometry").string()), Error);
}

// A write that fails (here: the partial shard's path is taken by a folder) throws naming the file
// and leaves no shard, not even the one an earlier write left, beside the new config.json.
TEST(SyntheticFolder, AFailedWriteLeavesNoShard) {
  const fs::path dir = fresh("synthetic-failed-write");
  fs::create_directories(dir / "model.safetensors.partial" / "taken");
  std::ofstream(dir / "model.safetensors") << "an older shard";
  try {
    write_synthetic_hf_folder(synthetic_config("tiny"), 1, dir.string());
    ADD_FAILURE() << "the write did not fail";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors.partial"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
}

}  // namespace
}  // namespace kvevict
