#include "core/model/hf_weights.h"

#include <cmath>

#include "core/model/dequant.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

using Shape = std::vector<uint64_t>;

class TensorLoader {
 public:
  TensorLoader(const SafetensorsModel& tensors, ModelInfo& info, WeightStorage storage)
      : tensors_(tensors), info_(info), storage_(storage) {}

  // A [rows][cols] matrix: F16/BF16 kept in the shard with native storage, else read into f32.
  void matrix(const std::string& name, uint64_t rows, uint64_t cols, std::vector<float>& f32, TypedMatrix& native) {
    const SafetensorsTensor& t = tensors_.get(name);
    const uint32_t type = t.dtype == "F16" ? 1u : t.dtype == "BF16" ? 30u : 0u;
    if (storage_ != WeightStorage::Native || type == 0 || t.shape != Shape{rows, cols}) {
      f32 = (*this)(name, {rows, cols});  // checks the shape and names the tensor on a mismatch
      return;
    }
    native = {type, static_cast<int>(rows), static_cast<int>(cols), static_cast<size_t>(cols) * 2, t.data};
    if (const int64_t at = first_non_finite(type, t.data, rows, cols, native.row_bytes, t.file, name); at >= 0)
      throw ModelError(t.file, "tensor '" + name + "' has a non-finite value at element " + std::to_string(at));
    info_.tensor_types[t.dtype] += 1;
    info_.n_params += static_cast<int64_t>(rows * cols);
  }

  std::vector<float> operator()(const std::string& name, const Shape& shape) {
    std::vector<float> values = tensors_.read_f32(name, shape);
    // NaN or infinite weights only ever produce garbage logits: refuse them where they are found.
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        throw ModelError(tensors_.get(name).file, "tensor '" + name + "' has a non-finite value at element " +
                                                      std::to_string(i));
      }
    }
    info_.tensor_types[tensors_.get(name).dtype] += 1;
    info_.n_params += static_cast<int64_t>(values.size());
    return values;
  }

 private:
  const SafetensorsModel& tensors_;
  ModelInfo& info_;
  WeightStorage storage_;
};

}  // namespace

Weights load_hf_weights(const SafetensorsModel& tensors, const ModelConfig& c, ModelInfo& info, WeightStorage storage) {
  TensorLoader load(tensors, info, storage);
  const uint64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim, vocab = c.vocab_size;
  Weights w;
  load.matrix("model.embed_tokens.weight", vocab, dim, w.token_embedding, w.native_embedding);
  w.layers.resize(c.n_layers);
  w.native_layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    NativeLayer& N = w.native_layers[l];
    L.attn_norm = load(p + "input_layernorm.weight", {dim});
    load.matrix(p + "self_attn.q_proj.weight", q_dim, dim, L.wq, N.wq);
    load.matrix(p + "self_attn.k_proj.weight", kv_dim, dim, L.wk, N.wk);
    load.matrix(p + "self_attn.v_proj.weight", kv_dim, dim, L.wv, N.wv);
    load.matrix(p + "self_attn.o_proj.weight", dim, q_dim, L.wo, N.wo);
    if (c.qkv_bias) {
      L.bq = load(p + "self_attn.q_proj.bias", {q_dim});
      L.bk = load(p + "self_attn.k_proj.bias", {kv_dim});
      L.bv = load(p + "self_attn.v_proj.bias", {kv_dim});
    }
    L.ffn_norm = load(p + "post_attention_layernorm.weight", {dim});
    load.matrix(p + "mlp.gate_proj.weight", hidden, dim, L.w_gate, N.w_gate);
    load.matrix(p + "mlp.up_proj.weight", hidden, dim, L.w_up, N.w_up);
    load.matrix(p + "mlp.down_proj.weight", dim, hidden, L.w_down, N.w_down);
  }
  w.final_norm = load("model.norm.weight", {dim});
  // Tied models may still store lm_head (a copy); HF ties it to the embedding anyway, so it is skipped.
  if (!c.tied_embeddings) {
    if (!tensors.find("lm_head.weight")) {
      throw ModelError(tensors.source(), "tensor 'lm_head.weight' is missing and config.json says tie_word_embeddings "
                                         "is false");
    }
    load.matrix("lm_head.weight", vocab, dim, w.output, w.native_output);
  }
  if (!w.has_native()) w.native_layers.clear();
  return w;
}

}  // namespace kvevict
