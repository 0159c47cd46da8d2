// load_gguf: a GGUF file of the llama architecture -> Model (config, weights, tokenizer, info).
// Native storage keeps each non-F32 matrix as a TypedMatrix into the mapped file (Weights::storage
// holds the GgufFile); F32 storage, and every norm and bias, dequantise to f32.
#include <algorithm>
#include <climits>
#include <numbers>
#include <cmath>

#include "core/model/dequant.h"
#include "core/model/ggml_types.h"
#include "core/model/gguf_reader.h"
#include "core/model/gguf_tokenizer.h"
#include "core/model/model.h"

namespace kvevict {
namespace {

int config_int(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
  std::optional<int64_t> v = f.opt_int(key);
  if (!v) v = fallback;
  if (!v) f.fail("missing metadata " + key);
  if (*v <= 0 || *v > INT_MAX) f.fail("metadata " + key + " = " + std::to_string(*v) + " is out of range");
  return static_cast<int>(*v);
}

// Llama 3.1-style RoPE scaling: llama.cpp's converter stores it as per-frequency divisors
// (rope_freqs.weight, head_dim/2 floats) rather than parameters. The divisors follow
//   wavelength < orig/high: 1;  wavelength > orig/low: factor;  else 1 / ((1-s)/factor + s),
//   s = (orig/wavelength - low) / (high - low)
// Meta's released models use low = 1, high = 4, orig = 8192; the factor is the largest divisor.
// The tensor is accepted only when it matches that formula, so the decoder's parametric "llama3"
// scaling reproduces it exactly; anything else is refused.
void read_llama3_scaling(const GgufFile& f, ModelConfig& c) {
  const GgufTensorInfo& t = *f.find_tensor("rope_freqs.weight");
  const uint64_t n = static_cast<uint64_t>(c.head_dim / 2);
  if (t.type != static_cast<uint32_t>(GgmlType::F32) || t.n_elements != n) {
    f.fail("rope_freqs.weight must be " + std::to_string(n) + " F32 values (head_dim / 2)");
  }
  std::vector<float> r(n);
  dequantize(t.type, f.tensor_data(t), n, r.data(), f.path(), t.name);
  float factor = 1.0f;
  for (float v : r) {
    if (!std::isfinite(v) || v <= 0.0f) f.fail("rope_freqs.weight holds a non-positive or non-finite factor");
    factor = std::max(factor, v);
  }
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_max_position = config_int(f, "llama.rope.scaling.original_context_length", 8192);
  const double low_wavelength = s.original_max_position / s.low_freq_factor;
  const double high_wavelength = s.original_max_position / s.high_freq_factor;
  for (uint64_t i = 0; i < n; ++i) {
    const double freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / c.head_dim);
    const double wavelength = 2.0 * std::numbers::pi / freq;
    double expected = factor;
    if (wavelength < high_wavelength) {
      expected = 1.0;
    } else if (wavelength <= low_wavelength) {
      const double smooth = (s.original_max_position / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      expected = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    if (std::fabs(r[i] - expected) > 1e-3 * expected) {
      f.fail("rope_freqs.weight[" + std::to_string(i) + "] = " + std::to_string(r[i]) +
             " does not follow Llama 3.1 scaling (factor " + std::to_string(factor) + ", low 1, high 4, original context " +
             std::to_string(s.original_max_position) + "; expected " + std::to_string(expected) +
             "); other per-frequency RoPE factors are not supported");
    }
  }
  if (factor > 1.0f) c.rope_scaling = s;
}

ModelConfig read_config(const GgufFile& f) {
  ModelConfig c;
  c.architecture = "llama";
  c.name = f.opt_string("general.name").value_or("");
  c.n_layers = config_int(f, "llama.block_count");
  c.dim = config_int(f, "llama.embedding_length");
  c.n_heads = config_int(f, "llama.attention.head_count");
  c.n_kv_heads = config_int(f, "llama.attention.head_count_kv", c.n_heads);
  c.hidden_dim = config_int(f, "llama.feed_forward_length");
  c.context_length = config_int(f, "llama.context_length");
  if (f.find("llama.attention.key_length")) {
    c.head_dim = config_int(f, "llama.attention.key_length");
  } else {
    if (c.dim % c.n_heads != 0) {
      f.fail("embedding length " + std::to_string(c.dim) + " is not a multiple of the head count " + std::to_string(c.n_heads));
    }
    c.head_dim = c.dim / c.n_heads;
  }
  if (f.find("llama.attention.value_length") && config_int(f, "llama.attention.value_length") != c.head_dim) {
    f.fail("llama.attention.value_length differs from the key length; kvevict needs equal K and V head dims");
  }
  if (f.find("llama.rope.dimension_count") && config_int(f, "llama.rope.dimension_count") != c.head_dim) {
    f.fail("llama.rope.dimension_count = " + std::to_string(config_int(f, "llama.rope.dimension_count")) +
           " differs from the head dim " + std::to_string(c.head_dim) + " (partial RoPE is not supported)");
  }
  c.rope_theta = static_cast<float>(f.opt_float("llama.rope.freq_base").value_or(10000.0));
  c.norm_eps = static_cast<float>(f.opt_float("llama.attention.layer_norm_rms_epsilon").value_or(1e-5));
  c.rope_style = RopeStyle::AdjacentPairs;  // llama.cpp's converter permutes HF q/k rows to Meta's layout

  const std::string scaling = f.opt_string("llama.rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = static_cast<float>(f.opt_float("llama.rope.scaling.factor").value_or(1.0));
  } else if (scaling != "none") {
    f.fail("unsupported rope scaling type '" + scaling + "' (llama.rope.scaling.type; supported: none, linear)");
  }
  if (f.find_tensor("rope_freqs.weight")) read_llama3_scaling(f, c);
  return c;
}

class TensorLoader {
 public:
  TensorLoader(const GgufFile& f, WeightStorage storage) : f_(f), storage_(storage) {}

  // The tensor `name` with shape `dims` (ne[0] first), dequantised to f32 (row-major, ne[0] fastest).
  std::vector<float> load(const std::string& name, std::vector<uint64_t> dims) const {
    const GgufTensorInfo& t = checked(name, dims);
    std::vector<float> out(t.n_elements);
    dequantize(t.type, f_.tensor_data(t), t.n_elements, out.data(), f_.path(), name);
    for (float v : out) {
      if (!std::isfinite(v)) f_.fail("tensor " + name + " holds a non-finite value");
    }
    return out;
  }

  // The matrix `name` ([rows][cols] = dims {cols, rows}): in native storage, a non-F32 matrix with a
  // kernel stays in the file (returned as a TypedMatrix, f32 left empty); otherwise f32 is filled.
  void load_matrix(const std::string& name, uint64_t cols, uint64_t rows, std::vector<float>& f32, TypedMatrix& native) const {
    const GgufTensorInfo& t = checked(name, {cols, rows});
    const GgmlTypeTraits* traits = ggml_type_traits(t.type);
    const bool keep = storage_ == WeightStorage::Native && t.type != static_cast<uint32_t>(GgmlType::F32) &&
                      traits && traits->dequantizable && cols % traits->block_elements == 0;
    if (!keep) {
      f32 = load(name, {cols, rows});
      return;
    }
    native.type = t.type;
    native.rows = static_cast<int>(rows);
    native.cols = static_cast<int>(cols);
    native.row_bytes = ggml_tensor_bytes(t.type, cols, f_.path(), name);
    native.data = f_.tensor_data(t);
    // The same finiteness check as the f32 path, without an f32 copy.
    if (first_non_finite(t.type, native.data, rows, cols, native.row_bytes, f_.path(), name) >= 0)
      f_.fail("tensor " + name + " holds a non-finite value");
  }
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  bool native() const { return storage_ == WeightStorage::Native; }

 private:
  static std::string shape(const std::vector<uint64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
  const GgufTensorInfo& checked(const std::string& name, const std::vector<uint64_t>& dims) const {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) f_.fail("missing tensor " + name);
    std::vector<uint64_t> got = t->dims;
    while (got.size() > dims.size() && got.back() == 1) got.pop_back();  // [n, 1] is still [n]
    if (got != dims) f_.fail("tensor " + name + " has shape " + shape(t->dims) + ", expected " + shape(dims) + " from the config");
    if (dims.size() == 2 && (dims[0] > INT_MAX || dims[1] > INT_MAX)) f_.fail("tensor " + name + " is too large");
    return *t;
  }

  const GgufFile& f_;
  WeightStorage storage_;
};

}  // namespace

std::unique_ptr<Model> load_gguf(const std::string& path, WeightStorage storage) {
  auto file = std::make_shared<const GgufFile>(path);
  const GgufFile& f = *file;
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama") f.fail("architecture '" + arch + "' is not supported (kvevict reads GGUF files of the llama architecture)");

  auto model = std::make_unique<Model>();
  ModelConfig& c = model->config;
  c = read_config(f);
  model->tokenizer = tokenizer_from_gguf(f);
  c.vocab_size = model->tokenizer->vocab_size();
  if (auto v = f.opt_int("llama.vocab_size"); v && *v != c.vocab_size) {
    f.fail("llama.vocab_size = " + std::to_string(*v) + " but the tokenizer has " + std::to_string(c.vocab_size) + " tokens");
  }
  c.tied_embeddings = !f.find_tensor("output.weight");
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.validate(path);

  ModelInfo& info = model->info;
  info.format = "gguf";
  info.path = path;
  for (const GgufTensorInfo& t : f.tensors()) {
    ++info.tensor_types[ggml_type_name(t.type)];
    info.n_params += static_cast<int64_t>(t.n_elements);
  }
  if (f.opt_string("tokenizer.chat_template").value_or("").find("<|im_start|>") != std::string::npos) {
    info.chat_template = "chatml";
  }

  const uint64_t dim = c.dim, q = c.q_dim(), kv = c.kv_dim(), hidden = c.hidden_dim, vocab = c.vocab_size;
  TensorLoader t(f, storage);
  Weights& w = model->weights;
  t.load_matrix("token_embd.weight", dim, vocab, w.token_embedding, w.native_embedding);
  w.layers.resize(c.n_layers);
  w.native_layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    NativeLayer& N = w.native_layers[l];
    L.attn_norm = t.load(p + "attn_norm.weight", {dim});
    t.load_matrix(p + "attn_q.weight", dim, q, L.wq, N.wq);
    t.load_matrix(p + "attn_k.weight", dim, kv, L.wk, N.wk);
    t.load_matrix(p + "attn_v.weight", dim, kv, L.wv, N.wv);
    t.load_matrix(p + "attn_output.weight", q, dim, L.wo, N.wo);
    if (c.qkv_bias) {
      L.bq = t.load(p + "attn_q.bias", {q});
      L.bk = t.load(p + "attn_k.bias", {kv});
      L.bv = t.load(p + "attn_v.bias", {kv});
    }
    L.ffn_norm = t.load(p + "ffn_norm.weight", {dim});
    t.load_matrix(p + "ffn_gate.weight", dim, hidden, L.w_gate, N.w_gate);
    t.load_matrix(p + "ffn_up.weight", dim, hidden, L.w_up, N.w_up);
    t.load_matrix(p + "ffn_down.weight", hidden, dim, L.w_down, N.w_down);
  }
  w.final_norm = t.load("output_norm.weight", {dim});
  if (!c.tied_embeddings) t.load_matrix("output.weight", dim, vocab, w.output, w.native_output);
  if (w.has_native()) {
    w.storage = file;
  } else {
    w.native_layers.clear();  // every matrix is f32: nothing points into the file
  }
  return model;
}

}  // namespace kvevict
