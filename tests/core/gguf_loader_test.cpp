// Tiny llama GGUF files written by the test (tests/core/gguf_writer.h) load with the right config
// and exactly the weights that were written, in the layout the decoder expects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <filesystem>

#include "core/model/dequant.h"
#include "core/model/gguf_reader.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "gguf_writer.h"
#include "gguf_test_util.h"

namespace kvevict {
namespace {

struct Case {
  const char* label;
  int n_heads, n_kv_heads, head_dim, dim;
  bool tied;
  uint32_t type;
  bool key_length;
};

class TinyGgufLoad : public ::testing::TestWithParam<Case> {};

TEST_P(TinyGgufLoad, ConfigAndWeights) {
  const Case& c = GetParam();
  test::TinyLlama spec;
  spec.n_heads = c.n_heads;
  spec.n_kv_heads = c.n_kv_heads;
  spec.head_dim = c.head_dim;
  spec.dim = c.dim;
  spec.hidden_dim = 64;
  spec.tied = c.tied;
  spec.weight_type = c.type;
  spec.write_key_length = c.key_length;
  spec.seed = static_cast<uint32_t>(c.n_heads * 31 + c.n_kv_heads);
  const std::string path = test::temp_file_path(std::string("tiny_") + c.label + ".gguf");
  spec.writer().write(path);

  const auto m = load_gguf(path, WeightStorage::F32);
  const auto native = load_gguf(path, WeightStorage::Native);
  std::filesystem::remove(path);
  const ModelConfig& cfg = m->config;
  EXPECT_EQ(cfg.architecture, "llama");
  EXPECT_EQ(cfg.name, "tiny-test-llama");
  EXPECT_EQ(cfg.n_layers, 2);
  EXPECT_EQ(cfg.dim, c.dim);
  EXPECT_EQ(cfg.n_heads, c.n_heads);
  EXPECT_EQ(cfg.n_kv_heads, c.n_kv_heads);
  EXPECT_EQ(cfg.group_size(), c.n_heads / c.n_kv_heads);
  EXPECT_EQ(cfg.head_dim, c.head_dim);
  EXPECT_EQ(cfg.hidden_dim, 64);
  EXPECT_EQ(cfg.vocab_size, spec.vocab());
  EXPECT_EQ(cfg.context_length, 128);
  EXPECT_EQ(cfg.rope_theta, 10000.0f);
  EXPECT_EQ(cfg.norm_eps, 1e-5f);
  EXPECT_EQ(cfg.rope_style, RopeStyle::AdjacentPairs);
  EXPECT_EQ(cfg.tied_embeddings, c.tied);

  // GGUF stores ne[0] fastest, which is the decoder's [out][in] row-major: a straight copy.
  const Weights& w = m->weights;
  EXPECT_EQ(w.token_embedding, spec.tensor("token_embd.weight"));
  ASSERT_EQ(w.layers.size(), 2u);
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights& L = w.layers[l];
    EXPECT_EQ(L.attn_norm, spec.tensor(p + "attn_norm.weight"));
    EXPECT_EQ(L.wq, spec.tensor(p + "attn_q.weight"));
    EXPECT_EQ(L.wk, spec.tensor(p + "attn_k.weight"));
    EXPECT_EQ(L.wv, spec.tensor(p + "attn_v.weight"));
    EXPECT_EQ(L.wo, spec.tensor(p + "attn_output.weight"));
    EXPECT_EQ(L.ffn_norm, spec.tensor(p + "ffn_norm.weight"));
    EXPECT_EQ(L.w_gate, spec.tensor(p + "ffn_gate.weight"));
    EXPECT_EQ(L.w_up, spec.tensor(p + "ffn_up.weight"));
    EXPECT_EQ(L.w_down, spec.tensor(p + "ffn_down.weight"));
    EXPECT_EQ(L.wq.size(), static_cast<size_t>(c.n_heads * c.head_dim * c.dim));
    EXPECT_EQ(L.wk.size(), static_cast<size_t>(c.n_kv_heads * c.head_dim * c.dim));
  }
  EXPECT_EQ(w.final_norm, spec.tensor("output_norm.weight"));
  if (c.tied) {
    EXPECT_TRUE(w.output.empty());
    EXPECT_EQ(&w.output_matrix(), &w.token_embedding);
  } else {
    EXPECT_EQ(w.output, spec.tensor("output.weight"));
  }

  // Native storage: F32 files stay f32; other types keep the file's blocks (no f32 copy), which
  // dequantise to exactly the values written.
  const Weights& nw = native->weights;
  EXPECT_EQ(nw.has_native(), c.type != 0);
  if (c.type != 0) {
    EXPECT_TRUE(nw.layers[0].wq.empty());
    EXPECT_TRUE(nw.token_embedding.empty());
    const auto values = [](const TypedMatrix& t) {
      std::vector<float> v(static_cast<size_t>(t.rows) * t.cols);
      dequantize(t.type, t.data, v.size(), v.data(), "test", "t");
      return v;
    };
    EXPECT_EQ(nw.native_embedding.type, c.type);
    EXPECT_EQ(values(nw.native_embedding), spec.tensor("token_embd.weight"));
    for (int l = 0; l < 2; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      const NativeLayer& N = nw.native_layers[l];
      EXPECT_EQ(values(N.wq), spec.tensor(p + "attn_q.weight"));
      EXPECT_EQ(values(N.wo), spec.tensor(p + "attn_output.weight"));
      EXPECT_EQ(values(N.w_down), spec.tensor(p + "ffn_down.weight"));
      EXPECT_EQ(N.w_down.rows, c.dim);
      EXPECT_EQ(N.w_down.cols, 64);
      EXPECT_EQ(nw.layers[l].attn_norm, spec.tensor(p + "attn_norm.weight"));
    }
    if (!c.tied) {
      EXPECT_EQ(values(nw.native_output), spec.tensor("output.weight"));
    }
  }

  const ModelInfo& info = m->info;
  EXPECT_EQ(info.format, "gguf");
  EXPECT_EQ(info.path, path);
  EXPECT_EQ(info.chat_template, "chatml");
  const char* type_name = c.type == 0 ? "F32" : c.type == 1 ? "F16" : "Q8_0";
  const int64_t n_matrices = 1 + 2 * 7 + (c.tied ? 0 : 1);
  if (c.type == 0) {
    EXPECT_EQ(info.tensor_types.at("F32"), n_matrices + 2 * 2 + 1);
  } else {
    EXPECT_EQ(info.tensor_types.at(type_name), n_matrices);
    EXPECT_EQ(info.tensor_types.at("F32"), 2 * 2 + 1);
  }
  int64_t params = 0;
  for (const auto& [name, v] : spec.tensors) params += static_cast<int64_t>(v.size());
  EXPECT_EQ(info.n_params, params);

  ASSERT_NE(m->tokenizer, nullptr);
  EXPECT_EQ(m->tokenizer->kind(), "bpe");
  EXPECT_EQ(m->tokenizer->vocab_size(), spec.vocab());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TinyGgufLoad,
    ::testing::Values(Case{"gqa1_f32", 4, 4, 8, 32, true, 0, false},      // G = 1 (multi-head)
                      Case{"gqa2_f16", 4, 2, 8, 32, true, 1, false},      // G = 2
                      Case{"gqa3_q8", 6, 2, 16, 64, false, 8, true},      // G = 3, Q8_0, untied, head_dim != dim/heads
                      Case{"gqa4_f16", 8, 2, 4, 32, false, 1, false},     // G = 4, untied
                      Case{"hd12_f32", 4, 2, 12, 48, true, 0, false},     // head dim 12 (not a power of two)
                      Case{"hd6_keylen", 3, 1, 6, 32, false, 0, true}),   // G = 3, head dim 6 from key_length
    [](const auto& info) { return std::string(info.param.label); });

std::string load_error(test::GgufWriter w, const std::string& label) {
  const std::string path = test::temp_file_path(label + ".gguf");
  w.write(path);
  std::string msg;
  try {
    load_gguf(path);
  } catch (const ModelError& e) {
    msg = e.what();
  }
  std::filesystem::remove(path);
  EXPECT_FALSE(msg.empty()) << label << " loaded";
  EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the file: " << msg;
  return msg;
}

TEST(GgufLoader, RejectsOtherArchitectures) {
  test::GgufWriter w;
  w.add_string("general.architecture", "gemma3");
  EXPECT_NE(load_error(w, "arch").find("gemma3"), std::string::npos);
}

TEST(GgufLoader, RejectsShapeMismatchWithConfig) {
  test::TinyLlama spec;
  test::GgufWriter w = spec.writer();
  w.add_u32("llama.embedding_length", 48);  // duplicate key: the reader refuses it first
  EXPECT_NE(load_error(w, "dupkey").find("duplicate"), std::string::npos);

  // A config that disagrees with the tensors: claim more KV heads than attn_k holds.
  test::TinyLlama wrong;
  wrong.n_kv_heads = 2;
  test::GgufWriter w2 = wrong.writer();
  std::vector<uint8_t> bytes = w2.bytes();
  // Patch llama.attention.head_count_kv from 2 to 4 in place (the value follows its key and type).
  const std::string key = "llama.attention.head_count_kv";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  ASSERT_NE(it, bytes.end());
  const size_t value_at = static_cast<size_t>(it - bytes.begin()) + key.size() + 4;
  ASSERT_EQ(bytes[value_at], 2);
  bytes[value_at] = 4;
  const std::string path = test::temp_file_path("kvheads.gguf");
  test::GgufWriter::write_bytes(path, bytes);
  try {
    load_gguf(path);
    ADD_FAILURE() << "mismatched shapes accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.attn_k.weight"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(GgufLoader, RejectsMissingTensorAndUnsupportedTokenizer) {
  test::TinyLlama spec;
  spec.n_layers = 1;
  // Declare 3 layers while only one is stored.
  std::vector<uint8_t> bytes = spec.writer().bytes();
  const std::string key = "llama.block_count";
  auto it = std::search(bytes.begin(), bytes.end(), key.begin(), key.end());
  bytes[static_cast<size_t>(it - bytes.begin()) + key.size() + 4] = 3;
  const std::string path = test::temp_file_path("layers.gguf");
  test::GgufWriter::write_bytes(path, bytes);
  try {
    load_gguf(path);
    ADD_FAILURE() << "missing layers accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor blk.1."), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);

  // Replace the pre-tokenizer name by an unknown one of the same length.
  std::vector<uint8_t> b = spec.writer().bytes();
  const std::string pre = "smollm";
  auto p = std::search(b.begin(), b.end(), pre.begin(), pre.end());
  std::copy_n("qwerty", 6, p);
  const std::string path2 = test::temp_file_path("pre.gguf");
  test::GgufWriter::write_bytes(path2, b);
  try {
    load_gguf(path2);
    ADD_FAILURE() << "unknown pre-tokenizer accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("qwerty"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path2);
}

// rope_freqs.weight written the way llama.cpp's converter does for Llama 3.1 (factor 8, low 1,
// high 4), with a small original context so the tiny head dim spans all three bands.
std::vector<float> llama3_rope_factors(int head_dim, double theta, double factor, double original) {
  std::vector<float> r;
  for (int i = 0; i < head_dim / 2; ++i) {
    const double wavelength = 2 * std::numbers::pi * std::pow(theta, 2.0 * i / head_dim);
    if (wavelength < original / 4) r.push_back(1.0f);
    else if (wavelength > original / 1) r.push_back(static_cast<float>(factor));
    else {
      const double s = (original / wavelength - 1) / (4 - 1);
      r.push_back(static_cast<float>(1 / ((1 - s) / factor + s)));
    }
  }
  return r;
}

TEST(GgufLoader, Llama3RopeFactorsBecomeLlama3Scaling) {
  test::TinyLlama spec;  // head_dim 8, theta 10000: wavelengths 6.3, 63, 628, 6283
  test::GgufWriter w = spec.writer();
  const std::vector<float> r = llama3_rope_factors(8, 10000.0, 8.0, 64.0);
  ASSERT_EQ(r[0], 1.0f);
  ASSERT_GT(r[1], 1.0f);
  ASSERT_LT(r[1], 8.0f);  // the smooth band is exercised
  ASSERT_EQ(r[3], 8.0f);
  w.add_f32_tensor("rope_freqs.weight", {4}, r);
  w.add_u32("llama.rope.scaling.original_context_length", 64);
  const std::string path = test::temp_file_path("llama3rope.gguf");
  w.write(path);
  const auto m = load_gguf(path);
  std::filesystem::remove(path);
  const RopeScaling& s = m->config.rope_scaling;
  EXPECT_EQ(s.type, "llama3");
  EXPECT_EQ(s.factor, 8.0f);
  EXPECT_EQ(s.low_freq_factor, 1.0f);
  EXPECT_EQ(s.high_freq_factor, 4.0f);
  EXPECT_EQ(s.original_max_position, 64);

  test::GgufWriter bad = spec.writer();
  bad.add_f32_tensor("rope_freqs.weight", {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  EXPECT_NE(load_error(bad, "badrope").find("rope_freqs.weight"), std::string::npos);
}

}  // namespace
}  // namespace kvevict
