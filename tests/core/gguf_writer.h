#pragma once
// A small GGUF writer for tests: metadata of every value type, tensors as raw bytes or encoded
// from floats (F32, F16, Q8_0), and a tiny-llama model builder (with a byte-level BPE vocabulary)
// whose exact weights the test keeps to compare against what the loader returns.
// Written from ggml's docs/gguf.md; used by the GGUF tests and reusable by any test that needs a
// model file.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model/dequant.h"
#include "quant_block_writer.h"

namespace kvevict::test {

class GgufWriter {
 public:
  enum Type : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

  uint32_t version = 3;
  uint64_t alignment = 32;  // used for layout; also written as general.alignment if set_alignment_key

  void add_u32(const std::string& key, uint32_t v) { kv(key, U32, pod(v)); }
  void add_i32(const std::string& key, int32_t v) { kv(key, I32, pod(v)); }
  void add_u64(const std::string& key, uint64_t v) { kv(key, U64, pod(v)); }
  void add_f32(const std::string& key, float v) { kv(key, F32, pod(v)); }
  void add_f64(const std::string& key, double v) { kv(key, F64, pod(v)); }
  void add_bool(const std::string& key, bool v) { kv(key, BOOL, pod(static_cast<uint8_t>(v))); }
  void add_string(const std::string& key, const std::string& v) { kv(key, STRING, str(v)); }
  void add_string_array(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b = pod(uint32_t{STRING});
    append(b, pod(uint64_t{v.size()}));
    for (const auto& s : v) append(b, str(s));
    kv(key, ARRAY, b);
  }
  template <typename T>
  void add_array(const std::string& key, uint32_t element_type, const std::vector<T>& v) {
    std::vector<uint8_t> b = pod(element_type);
    append(b, pod(uint64_t{v.size()}));
    for (const T& x : v) append(b, pod(x));
    kv(key, ARRAY, b);
  }
  // A value given as raw bytes after the type id (for hostile files).
  void add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value_bytes) { kv(key, type, value_bytes); }

  // A tensor from raw bytes; dims are ne[0] first. `offset` < 0: placed after the previous tensor.
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t ggml_type, std::vector<uint8_t> data,
                  int64_t offset = -1) {
    tensors_.push_back({name, std::move(dims), ggml_type, std::move(data), offset});
  }
  void add_f32_tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    add_tensor(name, std::move(dims), 0, std::move(b));
  }
  // Values must be exactly representable as IEEE half (the tests choose them so).
  void add_f16_tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    std::vector<uint8_t> b;
    for (float x : v) append(b, pod(float_to_half_exact(x)));
    add_tensor(name, std::move(dims), 1, std::move(b));
  }
  // Q8_0 with a per-block scale d = 2^-7 (a power of two, so d*q is exact): values must be
  // integers times 2^-7 in [-127, 127] * 2^-7.
  void add_q8_0_tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& v) {
    if (v.size() % 32) throw std::logic_error("Q8_0 needs whole blocks");
    std::vector<uint8_t> b;
    for (size_t i = 0; i < v.size(); i += 32) {
      append(b, pod(float_to_half_exact(1.0f / 128)));
      for (size_t k = 0; k < 32; ++k) {
        const float q = v[i + k] * 128.0f;
        if (q != std::round(q) || std::fabs(q) > 127) throw std::logic_error("value not representable in this Q8_0");
        b.push_back(static_cast<uint8_t>(static_cast<int8_t>(q)));
      }
    }
    add_tensor(name, std::move(dims), 8, std::move(b));
  }

  // The whole file. Records where each part starts (for tests that corrupt a specific field).
  std::vector<uint8_t> bytes() {
    std::vector<uint8_t> out;
    append(out, pod(uint32_t{0x46554747}));
    append(out, pod(version));
    append(out, pod(uint64_t{tensors_.size()}));
    append(out, pod(uint64_t{kvs_.size()}));
    for (const auto& k : kvs_) append(out, k);
    tensor_info_offset = out.size();
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      const uint64_t off = t.offset >= 0 ? static_cast<uint64_t>(t.offset) : next;
      offsets.push_back(off);
      next = align(off + t.data.size());
      append(out, str(t.name));
      append(out, pod(static_cast<uint32_t>(t.dims.size())));
      for (uint64_t d : t.dims) append(out, pod(d));
      append(out, pod(t.type));
      append(out, pod(off));
    }
    data_offset = align(out.size());
    out.resize(data_offset, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t at = data_offset + offsets[i];
      if (out.size() < at + tensors_[i].data.size()) out.resize(at + tensors_[i].data.size(), 0);
      std::memcpy(out.data() + at, tensors_[i].data.data(), tensors_[i].data.size());
    }
    return out;
  }

  void write(const std::string& path) { write_bytes(path, bytes()); }

  static void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
  }

  static uint16_t float_to_half_exact(float x) {
    if (x == 0.0f) return std::signbit(x) ? 0x8000 : 0;
    const uint16_t sign = x < 0 ? 0x8000 : 0;
    float a = std::fabs(x);
    int e = 0;
    const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    // Normal half: a = (1 + f/1024) * 2^(E-15), E in 1..30.
    const int E = e - 1 + 15;
    if (E < 1 || E > 30) throw std::logic_error("value outside the normal half range");
    const float frac = (m * 2.0f - 1.0f) * 1024.0f;
    if (frac != std::round(frac)) throw std::logic_error("value not exactly representable as half");
    return static_cast<uint16_t>(sign | (E << 10) | static_cast<uint16_t>(frac));
  }

  size_t tensor_info_offset = 0;  // valid after bytes()
  size_t data_offset = 0;         // valid after bytes()

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
    int64_t offset;
  };
  template <typename T>
  static std::vector<uint8_t> pod(T v) {
    std::vector<uint8_t> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  static std::vector<uint8_t> str(const std::string& s) {
    std::vector<uint8_t> b = pod(uint64_t{s.size()});
    b.insert(b.end(), s.begin(), s.end());
    return b;
  }
  static void append(std::vector<uint8_t>& a, const std::vector<uint8_t>& b) { a.insert(a.end(), b.begin(), b.end()); }
  void kv(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    std::vector<uint8_t> b = str(key);
    append(b, pod(type));
    append(b, value);
    kvs_.push_back(std::move(b));
  }
  uint64_t align(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }

  std::vector<std::vector<uint8_t>> kvs_;
  std::vector<Tensor> tensors_;
};

// The GPT-2 byte-level symbol of byte b, computed the straightforward way (independent of kvevict's table).
inline std::string gpt2_byte_symbol(uint8_t b) {
  uint32_t cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
  if (!printable) {
    uint32_t n = 0;
    for (uint32_t x = 0; x < b; ++x) {
      const bool p = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
      if (!p) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// A tiny llama model: geometry, storage type, and the exact f32 weights written.
struct TinyLlama {
  int n_layers = 2, dim = 32, n_heads = 4, n_kv_heads = 2, head_dim = 8, hidden_dim = 64, context = 128;
  bool tied = true;
  bool write_key_length = false;  // write llama.attention.key_length (needed when head_dim != dim / n_heads)
  uint32_t weight_type = 0;       // ggml type of the matrices (any of encode_blocks'); norms are always F32
  uint32_t seed = 1;
  bool spm_tokenizer = false;     // SentencePiece-style "llama" vocabulary instead of byte-level BPE

  // Byte-level vocabulary: specials, the 256 byte symbols, then the results of `merges`.
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<int32_t> token_types;
  std::vector<float> scores;  // SentencePiece vocabulary only

  // name -> values in GGUF order (ne[0] fastest), as written.
  std::vector<std::pair<std::string, std::vector<float>>> tensors;

  int vocab() const { return static_cast<int>(tokens.size()); }
  const std::vector<float>& tensor(const std::string& name) const {
    for (const auto& [n, v] : tensors) {
      if (n == name) return v;
    }
    throw std::logic_error("no tensor " + name);
  }

  GgufWriter writer() {
    build_vocab();
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_string("general.name", "tiny-test-llama");
    w.add_u32("llama.block_count", n_layers);
    w.add_u32("llama.context_length", context);
    w.add_u32("llama.embedding_length", dim);
    w.add_u32("llama.feed_forward_length", hidden_dim);
    w.add_u32("llama.attention.head_count", n_heads);
    w.add_u32("llama.attention.head_count_kv", n_kv_heads);
    w.add_f32("llama.rope.freq_base", 10000.0f);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_u32("llama.rope.dimension_count", head_dim);
    if (write_key_length) {
      w.add_u32("llama.attention.key_length", head_dim);
      w.add_u32("llama.attention.value_length", head_dim);
    }
    if (spm_tokenizer) {
      w.add_string("tokenizer.ggml.model", "llama");
      w.add_string_array("tokenizer.ggml.tokens", tokens);
      w.add_array("tokenizer.ggml.scores", GgufWriter::F32, scores);
      w.add_array("tokenizer.ggml.token_type", GgufWriter::I32, token_types);
      w.add_u32("tokenizer.ggml.unknown_token_id", 0);
    } else {
      w.add_string("tokenizer.ggml.model", "gpt2");
      w.add_string("tokenizer.ggml.pre", "smollm");
      w.add_string_array("tokenizer.ggml.tokens", tokens);
      w.add_array("tokenizer.ggml.token_type", GgufWriter::I32, token_types);
      w.add_string_array("tokenizer.ggml.merges", merges);
      w.add_bool("tokenizer.ggml.add_bos_token", false);
    }
    w.add_u32("tokenizer.ggml.bos_token_id", 1);
    w.add_u32("tokenizer.ggml.eos_token_id", 2);
    w.add_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}");

    std::mt19937 rng(seed);
    const uint64_t D = dim, Q = n_heads * head_dim, KV = n_kv_heads * head_dim, H = hidden_dim, V = vocab();
    auto matrix = [&](const std::string& name, uint64_t ne0, uint64_t ne1) { add(w, rng, name, {ne0, ne1}, weight_type); };
    auto norm = [&](const std::string& name) { add(w, rng, name, {D}, 0); };
    matrix("token_embd.weight", D, V);
    for (int l = 0; l < n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      norm(p + "attn_norm.weight");
      matrix(p + "attn_q.weight", D, Q);
      matrix(p + "attn_k.weight", D, KV);
      matrix(p + "attn_v.weight", D, KV);
      matrix(p + "attn_output.weight", Q, D);
      norm(p + "ffn_norm.weight");
      matrix(p + "ffn_gate.weight", D, H);
      matrix(p + "ffn_up.weight", D, H);
      matrix(p + "ffn_down.weight", H, D);
    }
    norm("output_norm.weight");
    if (!tied) matrix("output.weight", D, V);
    return w;
  }

 private:
  void build_vocab() {
    if (spm_tokenizer) return build_spm_vocab();
    tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    token_types = {3, 3, 3};
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(gpt2_byte_symbol(static_cast<uint8_t>(b)));
      token_types.push_back(1);
    }
    merges = {"h e", "l l", "he ll", "Ġ w", "o r", "Ġw or", "hell o"};
    for (const std::string& m : merges) {
      tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
      token_types.push_back(1);
    }
  }
  // <unk> <s> </s>, byte pieces <0x00>..<0xFF> (type 6), then pieces with U+2581 for spaces whose
  // scores make "hello" and "world" (with their leading space) whole tokens.
  void build_spm_vocab() {
    tokens = {"<unk>", "<s>", "</s>"};
    token_types = {2, 3, 3};
    scores = {0, 0, 0};
    char hex[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      tokens.push_back(hex);
      token_types.push_back(6);
      scores.push_back(0);
    }
    const std::string sp = "\xE2\x96\x81";
    const std::vector<std::string> pieces = {sp, "h", "e", "l", "o", "w", "r", "d", "he", "ll", "hell", "hello",
                                             sp + "hello", sp + "w", "or", sp + "wor", "ld", sp + "world"};
    for (size_t i = 0; i < pieces.size(); ++i) {
      tokens.push_back(pieces[i]);
      token_types.push_back(1);
      scores.push_back(-static_cast<float>(i));  // earlier pieces merge first
    }
  }
  void add(GgufWriter& w, std::mt19937& rng, const std::string& name, std::vector<uint64_t> dims, uint32_t type) {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    // Multiples of 2^-7 in [-1, 1): exact in F32, F16 and this writer's Q8_0.
    std::uniform_int_distribution<int> q(-127, 127);
    std::vector<float> v(n);
    for (float& x : v) x = static_cast<float>(q(rng)) / 128.0f;
    if (type == 0) {
      w.add_f32_tensor(name, dims, v);
    } else if (type == 1) {
      w.add_f16_tensor(name, dims, v);
    } else if (type == 8) {
      w.add_q8_0_tensor(name, dims, v);
    } else {
      // Other formats (quant_block_writer.h) round the values: keep what the file holds.
      std::vector<uint8_t> bytes = encode_blocks(type, v);
      dequantize(type, bytes.data(), n, v.data(), "test", name);
      w.add_tensor(name, dims, type, std::move(bytes));
    }
    tensors.emplace_back(name, std::move(v));
  }
};

}  // namespace kvevict::test
