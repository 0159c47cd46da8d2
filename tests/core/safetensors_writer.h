#pragma once
// Test helper: writes safetensors files and small Hugging Face model folders (config.json, one or
// more shards, tokenizer.json, tokenizer_config.json) from f32 values, stored as F32, F16 or BF16.
// Written from the format description (8-byte little-endian header length, JSON header, data).
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/model/hf_config.h"
#include "core/model/model_config.h"
#include "core/model/weights.h"

namespace kvevict::test {

enum class StDtype { F32, F16, BF16 };

inline const char* st_dtype_name(StDtype d) { return d == StDtype::F32 ? "F32" : d == StDtype::F16 ? "F16" : "BF16"; }

// float -> IEEE half, round to nearest even (finite inputs within the half range).
inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;  // implicit bit; shift into the subnormal position
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t half = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) ++half;  // carry may roll into the exponent: correct
  return static_cast<uint16_t>(half);
}

// float -> bfloat16, round to nearest even.
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

struct StTensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values;
  StDtype dtype = StDtype::F32;
};

inline std::string st_encode(const std::vector<float>& values, StDtype dtype) {
  std::string out;
  for (float v : values) {
    if (dtype == StDtype::F32) {
      out.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      uint16_t bits = dtype == StDtype::F16 ? f32_to_f16_bits(v) : f32_to_bf16_bits(v);
      out.append(reinterpret_cast<const char*>(&bits), 2);
    }
  }
  return out;
}

// header length (u64 LE) + header text + data, exactly as given (for hostile-file tests).
inline std::string st_raw(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

inline std::string st_bytes(const std::vector<StTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : tensors) {
    std::string bytes = st_encode(t.values, t.dtype);
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  return st_raw(header.dump(), data);
}

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh empty folder under the test temp dir.
inline std::filesystem::path fresh_dir(const std::string& name) {
  std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("kvevict_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Seeded random weights of the geometry in `c` (values ~ U(-0.5, 0.5); norms around 1).
inline Weights random_weights(const ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto fill = [&](size_t n, float scale = 1.0f, float offset = 0.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * u(rng);
    return v;
  };
  const size_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
  Weights w;
  w.token_embedding = fill(V * d);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights L;
    L.attn_norm = fill(d, 0.4f, 1.0f);
    L.wq = fill(q * d);
    L.wk = fill(kv * d);
    L.wv = fill(kv * d);
    L.wo = fill(d * q);
    if (c.qkv_bias) {
      L.bq = fill(q);
      L.bk = fill(kv);
      L.bv = fill(kv);
    }
    L.ffn_norm = fill(d, 0.4f, 1.0f);
    L.w_gate = fill(h * d);
    L.w_up = fill(h * d);
    L.w_down = fill(d * h);
    w.layers.push_back(std::move(L));
  }
  w.final_norm = fill(d, 0.4f, 1.0f);
  if (!c.tied_embeddings) w.output = fill(V * d);
  return w;
}

// The HF tensors of `w` under their HF names, in file order.
inline std::vector<StTensor> hf_tensors(const ModelConfig& c, const Weights& w, StDtype dtype) {
  const uint64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim, V = c.vocab_size;
  std::vector<StTensor> t;
  t.push_back({"model.embed_tokens.weight", {V, d}, w.token_embedding, dtype});
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const LayerWeights& L = w.layers[l];
    t.push_back({p + "input_layernorm.weight", {d}, L.attn_norm, dtype});
    t.push_back({p + "self_attn.q_proj.weight", {q, d}, L.wq, dtype});
    t.push_back({p + "self_attn.k_proj.weight", {kv, d}, L.wk, dtype});
    t.push_back({p + "self_attn.v_proj.weight", {kv, d}, L.wv, dtype});
    if (c.qkv_bias) {
      t.push_back({p + "self_attn.q_proj.bias", {q}, L.bq, dtype});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, L.bk, dtype});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, L.bv, dtype});
    }
    t.push_back({p + "self_attn.o_proj.weight", {d, q}, L.wo, dtype});
    t.push_back({p + "post_attention_layernorm.weight", {d}, L.ffn_norm, dtype});
    t.push_back({p + "mlp.gate_proj.weight", {h, d}, L.w_gate, dtype});
    t.push_back({p + "mlp.up_proj.weight", {h, d}, L.w_up, dtype});
    t.push_back({p + "mlp.down_proj.weight", {d, h}, L.w_down, dtype});
  }
  t.push_back({"model.norm.weight", {d}, w.final_norm, dtype});
  if (!c.tied_embeddings) t.push_back({"lm_head.weight", {V, d}, w.output, dtype});
  return t;
}

// config.json for `c` (architecture llama | mistral | qwen2): the production writer's text
// (hf_config.h), with the tiny tokenizer's BOS/EOS ids below and no _name_or_path, so the folder's
// name names the model as for a downloaded checkpoint.
inline nlohmann::json hf_config_json(const ModelConfig& c) {
  nlohmann::json j = nlohmann::json::parse(hf_config_text(c, 260, 261, "float32"));
  j.erase("_name_or_path");
  return j;
}

// GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves, the
// others take code points 256, 257, ... in byte order.
inline std::string gpt2_byte_char(unsigned byte) {
  auto printable = [](unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
  unsigned cp = byte;
  if (!printable(byte)) {
    unsigned n = 0;
    for (unsigned b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// A small byte-level BPE tokenizer.json: 256 byte tokens, a few merges, then the ChatML specials.
// Ids: 0..255 bytes (in byte order), 256 "Ġt", 257 "he", 258 "Ġthe", 259 "<|endoftext|>",
// 260 "<|im_start|>", 261 "<|im_end|>". `pre_tokenizer` defaults to the SmolLM form.
inline nlohmann::json tiny_tokenizer_json(bool merges_as_arrays = false,
                                          nlohmann::json pre_tokenizer = nlohmann::json()) {
  nlohmann::json vocab = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[gpt2_byte_char(b)] = b;
  const std::string G = gpt2_byte_char(' ');
  vocab[G + "t"] = 256;
  vocab["he"] = 257;
  vocab[G + "the"] = 258;
  nlohmann::json merges = nlohmann::json::array();
  for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{{G, "t"}, {"h", "e"}, {G + "t", "he"}}) {
    if (merges_as_arrays) {
      merges.push_back({a, b});
    } else {
      merges.push_back(a + " " + b);
    }
  }
  if (pre_tokenizer.is_null()) {
    pre_tokenizer = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Digits"}, {"individual_digits", true}},
                       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}};
  }
  nlohmann::json added = nlohmann::json::array();
  int id = 259;
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre_tokenizer},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
            {"merges", merges}}}};
}

constexpr int kTinyTokenizerSize = 262;

struct HfFolderOptions {
  StDtype dtype = StDtype::F32;
  int shards = 1;           // tensors split round-robin by file order into this many shards
  bool index_json = false;  // write model.safetensors.index.json (shards > 1)
};

// Writes config.json, the shards, tokenizer.json and a ChatML tokenizer_config.json into `dir`.
inline void write_hf_folder(const std::filesystem::path& dir, const ModelConfig& c, const Weights& w,
                            const HfFolderOptions& options = {}) {
  write_bytes(dir / "config.json", hf_config_json(c).dump(2));
  std::vector<StTensor> tensors = hf_tensors(c, w, options.dtype);
  const int n = options.shards;
  std::vector<std::vector<StTensor>> shards(n);
  for (size_t i = 0; i < tensors.size(); ++i) shards[i * n / tensors.size()].push_back(tensors[i]);
  nlohmann::json weight_map = nlohmann::json::object();
  for (int s = 0; s < n; ++s) {
    char name[64];
    if (n == 1) {
      std::snprintf(name, sizeof name, "model.safetensors");
    } else {
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, n);
    }
    write_bytes(dir / name, st_bytes(shards[s]));
    for (const auto& t : shards[s]) weight_map[t.name] = name;
  }
  if (options.index_json) {
    write_bytes(dir / "model.safetensors.index.json",
                nlohmann::json({{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}).dump(2));
  }
  write_bytes(dir / "tokenizer.json", tiny_tokenizer_json().dump());
  nlohmann::json tokenizer_config = {
      {"bos_token", "<|im_start|>"},
      {"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
      {"chat_template",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
       "'<|im_end|>' + '\\n'}}{% endfor %}"}};
  write_bytes(dir / "tokenizer_config.json", tokenizer_config.dump(2));
}

// A small Llama geometry for the tests; vocab covers the tiny tokenizer.
inline ModelConfig tiny_config(int n_heads, int n_kv_heads, int head_dim, const std::string& arch = "llama") {
  ModelConfig c;
  c.architecture = arch;
  c.n_layers = 2;
  c.dim = 24;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.head_dim = head_dim;
  c.hidden_dim = 40;
  c.vocab_size = 270;
  c.context_length = 64;
  c.rope_theta = 10000.0f;
  c.norm_eps = 1e-5f;
  c.rope_style = RopeStyle::HalfSplit;
  c.qkv_bias = arch == "qwen2";
  return c;
}

}  // namespace kvevict::test
