#include "core/model/hf_weights.h"

#include <cmath>

#include "core/util/error.h"

namespace kvevict {
namespace {

using Shape = std::vector<uint64_t>;

class TensorLoader {
 public:
  TensorLoader(const SafetensorsModel& tensors, ModelInfo& info) : tensors_(tensors), info_(info) {}

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
};

}  // namespace

Weights load_hf_weights(const SafetensorsModel& tensors, const ModelConfig& c, ModelInfo& info) {
  TensorLoader load(tensors, info);
  const uint64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.hidden_dim, vocab = c.vocab_size;
  Weights w;
  w.token_embedding = load("model.embed_tokens.weight", {vocab, dim});
  w.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights& L = w.layers[l];
    L.attn_norm = load(p + "input_layernorm.weight", {dim});
    L.wq = load(p + "self_attn.q_proj.weight", {q_dim, dim});
    L.wk = load(p + "self_attn.k_proj.weight", {kv_dim, dim});
    L.wv = load(p + "self_attn.v_proj.weight", {kv_dim, dim});
    L.wo = load(p + "self_attn.o_proj.weight", {dim, q_dim});
    if (c.qkv_bias) {
      L.bq = load(p + "self_attn.q_proj.bias", {q_dim});
      L.bk = load(p + "self_attn.k_proj.bias", {kv_dim});
      L.bv = load(p + "self_attn.v_proj.bias", {kv_dim});
    }
    L.ffn_norm = load(p + "post_attention_layernorm.weight", {dim});
    L.w_gate = load(p + "mlp.gate_proj.weight", {hidden, dim});
    L.w_up = load(p + "mlp.up_proj.weight", {hidden, dim});
    L.w_down = load(p + "mlp.down_proj.weight", {dim, hidden});
  }
  w.final_norm = load("model.norm.weight", {dim});
  // Tied models may still store lm_head (a copy); HF ties it to the embedding anyway, so it is skipped.
  if (!c.tied_embeddings) {
    if (!tensors.find("lm_head.weight")) {
      throw ModelError(tensors.source(), "tensor 'lm_head.weight' is missing and config.json says tie_word_embeddings "
                                         "is false");
    }
    w.output = load("lm_head.weight", {vocab, dim});
  }
  return w;
}

}  // namespace kvevict
