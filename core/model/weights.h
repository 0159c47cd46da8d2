#pragma once
// Model weights as the CPU decoder consumes them: float32, row-major, matrices stored [out][in]
// (y = W x). Loaders dequantise every tensor at load time, so decoding reads f32 weights; the
// original tensor types are kept in ModelInfo for `model-info`.
#include <cstdint>
#include <vector>

namespace kvevict {

struct LayerWeights {
  std::vector<float> attn_norm;  // [dim]
  std::vector<float> wq;         // [n_heads*head_dim][dim]
  std::vector<float> wk;         // [n_kv_heads*head_dim][dim]
  std::vector<float> wv;         // [n_kv_heads*head_dim][dim]
  std::vector<float> wo;         // [dim][n_heads*head_dim]
  std::vector<float> bq, bk, bv; // empty unless ModelConfig::qkv_bias
  std::vector<float> ffn_norm;   // [dim]
  std::vector<float> w_gate;     // [hidden_dim][dim]   (w1)
  std::vector<float> w_up;       // [hidden_dim][dim]   (w3)
  std::vector<float> w_down;     // [dim][hidden_dim]   (w2)
};

struct Weights {
  std::vector<float> token_embedding;  // [vocab][dim]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;       // [dim]
  std::vector<float> output;           // [vocab][dim]; empty when tied to token_embedding

  const std::vector<float>& output_matrix() const { return output.empty() ? token_embedding : output; }
};

}  // namespace kvevict
