// Hugging Face folders written by the tests (config.json + shards + tokenizer.json) load with the
// right config and weights; bad folders give ModelError naming the file and the problem.
#include <gtest/gtest.h>

#include <cmath>

#include "core/model/hf_config.h"
#include "core/model/dequant.h"
#include "core/model/hf_weights.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

using test::StDtype;
namespace fs = std::filesystem;

template <class F>
std::string model_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {  // ModelError or InputError (a missing or non-regular file): both exit 2
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a ModelError or InputError";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

// Largest |a - b| relative to the rounding a dtype allows (<= 1 means within half an ulp).
void expect_stored_as(const std::vector<float>& got, const std::vector<float>& want, StDtype dtype, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float rel = dtype == StDtype::F32 ? 0.0f : dtype == StDtype::F16 ? 1.0f / 2048 : 1.0f / 256;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::fabs(want[i]) + 1e-6f * (dtype != StDtype::F32))
        << what << "[" << i << "]";
  }
}

void expect_weights(const Weights& got, const Weights& want, StDtype dtype) {
  expect_stored_as(got.token_embedding, want.token_embedding, dtype, "token_embedding");
  ASSERT_EQ(got.layers.size(), want.layers.size());
  for (size_t l = 0; l < got.layers.size(); ++l) {
    const LayerWeights &g = got.layers[l], &w = want.layers[l];
    expect_stored_as(g.attn_norm, w.attn_norm, dtype, "attn_norm");
    expect_stored_as(g.wq, w.wq, dtype, "wq");
    expect_stored_as(g.wk, w.wk, dtype, "wk");
    expect_stored_as(g.wv, w.wv, dtype, "wv");
    expect_stored_as(g.wo, w.wo, dtype, "wo");
    expect_stored_as(g.bq, w.bq, dtype, "bq");
    expect_stored_as(g.bk, w.bk, dtype, "bk");
    expect_stored_as(g.bv, w.bv, dtype, "bv");
    expect_stored_as(g.ffn_norm, w.ffn_norm, dtype, "ffn_norm");
    expect_stored_as(g.w_gate, w.w_gate, dtype, "w_gate");
    expect_stored_as(g.w_up, w.w_up, dtype, "w_up");
    expect_stored_as(g.w_down, w.w_down, dtype, "w_down");
  }
  expect_stored_as(got.final_norm, want.final_norm, dtype, "final_norm");
  expect_stored_as(got.output, want.output, dtype, "output");
}

struct Geometry {
  int n_heads, n_kv_heads, head_dim;
  const char* arch;
  bool tied;
};

class HfFolderLoads : public ::testing::TestWithParam<std::tuple<Geometry, StDtype>> {};

TEST_P(HfFolderLoads, ConfigAndWeightsRoundTrip) {
  const auto [geo, dtype] = GetParam();
  ModelConfig c = test::tiny_config(geo.n_heads, geo.n_kv_heads, geo.head_dim, geo.arch);
  c.tied_embeddings = geo.tied;
  const Weights w = test::random_weights(c, 1234);
  const std::string name = std::string("hf_") + geo.arch + std::to_string(geo.n_heads) + "_" +
                           std::to_string(geo.n_kv_heads) + "_" + std::to_string(geo.head_dim) + "_" +
                           test::st_dtype_name(dtype);
  const fs::path dir = test::fresh_dir(name);
  test::write_hf_folder(dir, c, w, {dtype, geo.n_heads % 2 == 0 ? 2 : 1, geo.n_heads == 4});

  std::unique_ptr<Model> m = load_hf_folder(dir.string(), WeightStorage::F32);
  {
    // Native storage keeps F16/BF16 matrices in the mapped shards, with the same values.
    const auto n = load_hf_folder(dir.string(), WeightStorage::Native);
    const Weights& nw = n->weights;
    ASSERT_EQ(nw.has_native(), dtype != StDtype::F32);
    if (nw.has_native()) {
      EXPECT_TRUE(nw.token_embedding.empty());
      EXPECT_TRUE(nw.layers[0].w_down.empty());
      const auto values = [](const TypedMatrix& t) {
        std::vector<float> v(static_cast<size_t>(t.rows) * t.cols);
        dequantize(t.type, t.data, v.size(), v.data(), "test", "t");
        return v;
      };
      EXPECT_EQ(values(nw.native_embedding), m->weights.token_embedding);
      EXPECT_EQ(values(nw.native_layers[0].wq), m->weights.layers[0].wq);
      EXPECT_EQ(values(nw.native_layers[0].w_down), m->weights.layers[0].w_down);
      EXPECT_EQ(nw.layers[0].attn_norm, m->weights.layers[0].attn_norm);
      EXPECT_EQ(n->info.tensor_types, m->info.tensor_types);
    }
  }
  const ModelConfig& got = m->config;
  EXPECT_EQ(got.architecture, geo.arch);
  EXPECT_EQ(got.n_layers, c.n_layers);
  EXPECT_EQ(got.dim, c.dim);
  EXPECT_EQ(got.n_heads, c.n_heads);
  EXPECT_EQ(got.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(got.head_dim, c.head_dim);
  EXPECT_EQ(got.group_size(), geo.n_heads / geo.n_kv_heads);
  EXPECT_EQ(got.hidden_dim, c.hidden_dim);
  EXPECT_EQ(got.vocab_size, c.vocab_size);
  EXPECT_EQ(got.context_length, c.context_length);
  EXPECT_EQ(got.rope_style, RopeStyle::HalfSplit);
  EXPECT_EQ(got.tied_embeddings, geo.tied);
  EXPECT_EQ(got.qkv_bias, std::string(geo.arch) == "qwen2");
  EXPECT_FLOAT_EQ(got.norm_eps, 1e-5f);
  expect_weights(m->weights, w, dtype);
  EXPECT_EQ(m->weights.output.empty(), geo.tied);

  // Provenance: every stored tensor counted once, all in the written dtype.
  size_t n_tensors = test::hf_tensors(c, w, dtype).size();
  int64_t n_params = 0;
  for (const auto& t : test::hf_tensors(c, w, dtype)) n_params += static_cast<int64_t>(t.values.size());
  EXPECT_EQ(m->info.format, "safetensors");
  EXPECT_EQ(m->info.path, dir.string());
  EXPECT_EQ(m->info.tensor_types, (std::map<std::string, int64_t>{{test::st_dtype_name(dtype), n_tensors}}));
  EXPECT_EQ(m->info.n_params, n_params);
  EXPECT_EQ(m->info.chat_template, "chatml");
  EXPECT_EQ(m->tokenizer->vocab_size(), test::kTinyTokenizerSize);
}

const Geometry kGeometries[] = {
    {4, 4, 6, "llama", true},     // GQA ratio 1, head_dim * heads = dim; 2 shards + index
    {4, 2, 8, "mistral", false},  // ratio 2, head_dim declared (q_dim 32 != dim 24), untied lm_head
    {6, 2, 4, "llama", false},    // ratio 3, untied; 2 shards without index
    {8, 2, 6, "qwen2", true},     // ratio 4, q/k/v biases
    {3, 1, 10, "llama", true},    // ratio 3, head_dim 10 (not a power of two), one shard
};

INSTANTIATE_TEST_SUITE_P(Geometries, HfFolderLoads,
                         ::testing::Combine(::testing::ValuesIn(kGeometries),
                                            ::testing::Values(StDtype::F32, StDtype::F16, StDtype::BF16)),
                         [](const auto& info) {
                           const Geometry& g = std::get<0>(info.param);
                           return std::string(g.arch) + "_q" + std::to_string(g.n_heads) + "_kv" +
                                  std::to_string(g.n_kv_heads) + "_hd" + std::to_string(g.head_dim) + "_" +
                                  test::st_dtype_name(std::get<1>(info.param));
                         });

// ---- config.json ---------------------------------------------------------------------------

fs::path write_config(const std::string& name, const nlohmann::json& config) {
  fs::path dir = test::fresh_dir(name);
  test::write_bytes(dir / "config.json", config.dump(2));
  return dir / "config.json";
}

nlohmann::json base_config() { return test::hf_config_json(test::tiny_config(4, 2, 6)); }

TEST(HfConfig, DefaultsFollowTransformers) {
  nlohmann::json j = base_config();
  j.erase("num_key_value_heads");
  j.erase("rope_theta");
  j.erase("rms_norm_eps");
  j.erase("tie_word_embeddings");
  j.erase("architectures");
  ModelConfig c = parse_hf_config(write_config("cfg_defaults", j).string());
  EXPECT_EQ(c.architecture, "llama");  // from model_type
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 6);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "none");
}

TEST(HfConfig, RopeScalingLinearAndLlama3) {
  nlohmann::json j = base_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ModelConfig c = parse_hf_config(write_config("cfg_linear", j).string());
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 4.0f);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["rope_theta"] = 500000.0;
  c = parse_hf_config(write_config("cfg_llama3", j).string());
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);

  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_hf_config(write_config("cfg_default_rope", j).string()).rope_scaling.type, "none");
}

TEST(HfConfig, MistralSlidingWindowCapsTheContext) {
  ModelConfig base = test::tiny_config(4, 2, 6, "mistral");
  nlohmann::json j = test::hf_config_json(base);
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse_hf_config(write_config("cfg_swa", j).string()).context_length, 4096);
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse_hf_config(write_config("cfg_swa_null", j).string()).context_length, 32768);
}

struct BadConfig {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  const char* expected;
};

TEST(HfConfig, BadConfigsNameTheFileAndTheKey) {
  const std::vector<BadConfig> cases = {
      {"missing_hidden", [](auto& j) { j.erase("hidden_size"); }, "'hidden_size' is missing"},
      {"string_layers", [](auto& j) { j["num_hidden_layers"] = "two"; }, "'num_hidden_layers' must be an integer"},
      {"negative_heads", [](auto& j) { j["num_attention_heads"] = -4; }, "'num_attention_heads' = -4 is out of range"},
      {"huge_vocab", [](auto& j) { j["vocab_size"] = 1ull << 40; }, "'vocab_size'"},
      {"unknown_arch", [](auto& j) { j["architectures"] = {"GPTNeoXForCausalLM"}; }, "'GPTNeoXForCausalLM'"},
      {"unknown_type", [](auto& j) { j.erase("architectures"); j["model_type"] = "gemma"; }, "'gemma'"},
      {"gqa_mismatch", [](auto& j) { j["num_key_value_heads"] = 3; }, "not a multiple of KV heads"},
      {"yarn", [](auto& j) { j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}}; }, "'rope_scaling.type' is 'yarn'"},
      {"llama3_missing", [](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
       "'rope_scaling.low_freq_factor' is missing"},
      {"gelu", [](auto& j) { j["hidden_act"] = "gelu"; }, "'hidden_act'"},
      {"attention_bias", [](auto& j) { j["attention_bias"] = true; }, "'attention_bias'"},
      {"no_head_dim", [](auto& j) { j["num_attention_heads"] = 5; j["num_key_value_heads"] = 5; }, "'head_dim' is missing"},
      {"odd_head_dim", [](auto& j) { j["head_dim"] = 7; }, "head dim 7 is odd"},
      {"not_object", [](auto& j) { j = nlohmann::json::array({1, 2}); }, "must be a JSON object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    nlohmann::json j = base_config();
    c.edit(j);
    const std::string path = write_config(std::string("cfg_bad_") + c.name, j).string();
    std::string msg = model_error([&] { parse_hf_config(path); });
    EXPECT_HAS(msg, path);
    EXPECT_HAS(msg, c.expected);
  }
}

TEST(HfConfig, MalformedJsonGivesLineAndColumn) {
  fs::path dir = test::fresh_dir("cfg_syntax");
  test::write_bytes(dir / "config.json", "{\n  \"hidden_size\": 24,\n  \"vocab_size\": ,\n}");
  std::string msg = model_error([&] { parse_hf_config((dir / "config.json").string()); });
  EXPECT_HAS(msg, (dir / "config.json").string());
  EXPECT_HAS(msg, "line 3:17");
}

// ---- tensors ---------------------------------------------------------------------------------

struct FolderFixture {
  ModelConfig config = test::tiny_config(4, 2, 6);
  Weights weights;
  fs::path dir;
  explicit FolderFixture(const std::string& name, bool tied = false) {
    config.tied_embeddings = tied;
    weights = test::random_weights(config, 99);
    dir = test::fresh_dir(name);
  }
  // Writes the folder with `edit` applied to the tensor list.
  void write(const std::function<void(std::vector<test::StTensor>&)>& edit) {
    test::write_hf_folder(dir, config, weights);
    auto tensors = test::hf_tensors(config, weights, StDtype::F32);
    edit(tensors);
    test::write_bytes(dir / "model.safetensors", test::st_bytes(tensors));
  }
  test::StTensor& find(std::vector<test::StTensor>& ts, const std::string& name) {
    for (auto& t : ts) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }
};

TEST(HfWeights, MissingTensorIsNamed) {
  FolderFixture f("hf_missing");
  f.write([](auto& ts) { std::erase_if(ts, [](auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; }); });
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, f.dir.string());
  EXPECT_HAS(msg, "'model.layers.1.mlp.up_proj.weight' is missing");
}

TEST(HfWeights, ShapeMismatchNamesFileAndTensor) {
  FolderFixture f("hf_shape");
  f.write([&](auto& ts) { f.find(ts, "model.layers.0.self_attn.k_proj.weight").shape = {24, 12}; });
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, (f.dir / "model.safetensors").string());
  EXPECT_HAS(msg, "'model.layers.0.self_attn.k_proj.weight' has shape [24, 12], expected [12, 24]");
}

TEST(HfWeights, WrongDtypeNamesTensorAndDtype) {
  FolderFixture f("hf_dtype");
  f.write([](auto&) {});
  // Rewrite the norm as I32 of the same byte size.
  auto tensors = test::hf_tensors(f.config, f.weights, StDtype::F32);
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const auto& t : tensors) {
    std::string bytes = test::st_encode(t.values, StDtype::F32);
    header[t.name] = {{"dtype", t.name == "model.norm.weight" ? "I32" : "F32"}, {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  test::write_bytes(f.dir / "model.safetensors", test::st_raw(header.dump(), data));
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, (f.dir / "model.safetensors").string());
  EXPECT_HAS(msg, "'model.norm.weight' has dtype I32");
}

TEST(HfWeights, NonFiniteWeightIsNamed) {
  FolderFixture f("hf_nan");
  f.write([&](auto& ts) { f.find(ts, "model.layers.1.mlp.down_proj.weight").values[7] = std::nanf(""); });
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, (f.dir / "model.safetensors").string());
  EXPECT_HAS(msg, "'model.layers.1.mlp.down_proj.weight' has a non-finite value at element 7");
}

TEST(HfWeights, UntiedWithoutLmHeadIsAnError) {
  FolderFixture f("hf_no_head", /*tied=*/false);
  f.write([](auto& ts) { std::erase_if(ts, [](auto& t) { return t.name == "lm_head.weight"; }); });
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, "'lm_head.weight' is missing");
  EXPECT_HAS(msg, "tie_word_embeddings");
}

TEST(HfWeights, TiedModelIgnoresAStoredLmHead) {
  FolderFixture f("hf_tied_head", /*tied=*/true);
  f.write([&](auto& ts) { ts.push_back({"lm_head.weight", {270, 24}, std::vector<float>(270 * 24, 5.0f), StDtype::F32}); });
  auto m = load_hf_folder(f.dir.string());
  EXPECT_TRUE(m->weights.output.empty());
  EXPECT_EQ(&m->weights.output_matrix(), &m->weights.token_embedding);
}

TEST(HfFolder, MissingFilesAreNamed) {
  fs::path dir = test::fresh_dir("hf_empty");
  EXPECT_HAS(model_error([&] { load_hf_folder(dir.string()); }), "no config.json");
  EXPECT_HAS(model_error([&] { load_hf_folder((dir / "nope").string()); }), "cannot open Hugging Face model folder");
  FolderFixture f("hf_no_tokenizer");
  f.write([](auto&) {});
  fs::remove(f.dir / "tokenizer.json");
  EXPECT_HAS(model_error([&] { load_hf_folder(f.dir.string()); }), "no tokenizer.json");
}

TEST(HfFolder, TruncatedShardIsNamed) {
  FolderFixture f("hf_truncated");
  f.write([](auto&) {});
  fs::resize_file(f.dir / "model.safetensors", fs::file_size(f.dir / "model.safetensors") - 100);
  std::string msg = model_error([&] { load_hf_folder(f.dir.string()); });
  EXPECT_HAS(msg, (f.dir / "model.safetensors").string());
  EXPECT_HAS(msg, "run past the end of the data section");
}

}  // namespace
}  // namespace kvevict
