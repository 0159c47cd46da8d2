// A synthetic model written as a Hugging Face folder (core/model/synthetic_folder.h) loads back as
// the synthetic model: the same geometry (config.json through the real parser, RoPE scaling too),
// every tensor equal to the synthetic values rounded to the file's 16-bit type, a byte tokenizer
// with the synthetic ids, and the logits of the in-memory synthetic model (HalfSplit RoPE, as every
// HF checkpoint) within the weights' F16 rounding. Also: the synthetic values are pinned (both
// make_random_model and the folder draw them from synthetic_tensors), configs the folder cannot say
// are refused, and a failed write leaves no shard.
#include <gtest/gtest.h>

#include <algorithm>
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
    const ModelConfig c = synthetic_config("tiny");
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

// The synthetic models' values are pinned: tests and benchmarks across the project draw them, and
// make_random_model and the folder writer both take them from synthetic_tensors() (its order and
// stream ids). Two values of each tensor of layer 0 and of the model-level ones, tiny with biases
// and an untied head, seed 3, as make_random_model drew them before it took them from the list
// (every tensor's bytes hashed the same before and after that change, 2026-12-06). Within 1e-6
// relative: a build whose compiler contracts the draw's double expression into an FMA may round
// the last bit differently.
TEST(SyntheticFolder, TheSyntheticValuesArePinned) {
  ModelConfig c = synthetic_config("tiny");
  c.qkv_bias = true;
  c.tied_embeddings = false;
  struct Pin {
    const char* name;
    size_t count;
    float first, middle;
  };
  const Pin pins[] = {
      {"model.embed_tokens.weight", 20480, -0.286447376f, 0.535826385f},
      {"model.layers.0.input_layernorm.weight", 64, 1.0f, 1.0f},
      {"model.layers.0.post_attention_layernorm.weight", 64, 1.0f, 1.0f},
      {"model.layers.0.self_attn.q_proj.weight", 4096, 0.026444437f, -0.173094347f},
      {"model.layers.0.self_attn.k_proj.weight", 2048, -0.00221026177f, 0.00996700488f},
      {"model.layers.0.self_attn.v_proj.weight", 2048, 0.00494966982f, -6.4979271e-05f},
      {"model.layers.0.self_attn.o_proj.weight", 4096, 0.0598534495f, 0.0566591695f},
      {"model.layers.0.mlp.gate_proj.weight", 6144, -0.202076301f, -0.0346184708f},
      {"model.layers.0.mlp.up_proj.weight", 6144, 0.209460795f, -0.00151333062f},
      {"model.layers.0.mlp.down_proj.weight", 6144, -0.0290238913f, -0.00712474622f},
      {"model.layers.0.self_attn.q_proj.bias", 64, -0.172507331f, -0.0929596648f},
      {"model.layers.0.self_attn.k_proj.bias", 32, -0.0275066514f, -0.0739041418f},
      {"model.layers.0.self_attn.v_proj.bias", 32, 0.141615421f, 0.025809167f},
      {"model.norm.weight", 64, 1.0f, 1.0f},
      {"lm_head.weight", 20480, 0.358605444f, -0.101692431f}};
  const auto m = make_random_model(c, 3);
  const std::vector<SyntheticTensor> tensors = synthetic_tensors(c);
  EXPECT_EQ(tensors.size(), 2 + 12 * size_t(c.n_layers) + 1);
  int64_t params = 0;
  for (const SyntheticTensor& t : tensors) params += static_cast<int64_t>(t.count());
  EXPECT_EQ(m->info.n_params, params);
  for (const Pin& pin : pins) {
    const auto t = std::find_if(tensors.begin(), tensors.end(), [&](const SyntheticTensor& x) { return x.hf_name == pin.name; });
    ASSERT_NE(t, tensors.end()) << pin.name;
    const std::vector<float>& v = t->layer < 0 ? m->weights.*t->model_member : m->weights.layers.at(t->layer).*t->layer_member;
    ASSERT_EQ(v.size(), pin.count) << pin.name;
    EXPECT_NEAR(v.front(), pin.first, 1e-6 * std::fabs(pin.first)) << pin.name;
    EXPECT_NEAR(v[v.size() / 2], pin.middle, 1e-6 * std::fabs(pin.middle)) << pin.name;
  }
}

TEST(SyntheticFolder, AConfigItCannotWriteIsRefused) {
  ModelConfig c = synthetic_config("tiny");
  c.qkv_bias = true;  // a llama config.json cannot say so: the folder would load without them
  EXPECT_THROW(write_synthetic_hf_folder(c, 1, fresh("synthetic-llama-biases").string()), UsageError);
  c = synthetic_config("tiny");
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
