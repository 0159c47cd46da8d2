#pragma once
// Geometry and numerics of a Llama-family model, filled by every loader and validated once.
#include <cstdint>
#include <string>

namespace kvevict {

// How RoPE pairs the coordinates of a head:
//   AdjacentPairs: (x[2i], x[2i+1])          llama2.c, GGUF (llama.cpp permutes HF weights to this)
//   HalfSplit:     (x[i], x[i + head_dim/2]) Hugging Face `rotate_half`
enum class RopeStyle { AdjacentPairs, HalfSplit };

// Rope scaling declared by the supported configs. "none", "linear" (positions / factor) and
// "llama3" (frequency-dependent, Llama 3.1) are implemented.
struct RopeScaling {
  std::string type = "none";
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position = 8192;
};

struct ModelConfig {
  std::string architecture = "llama";  // llama | mistral | qwen2
  std::string name;                    // free text, e.g. general.name from GGUF
  int n_layers = 0;
  int dim = 0;         // hidden size
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (GQA when < n_heads)
  int head_dim = 0;
  int hidden_dim = 0;  // SwiGLU intermediate size
  int vocab_size = 0;
  int context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  RopeStyle rope_style = RopeStyle::AdjacentPairs;
  RopeScaling rope_scaling;
  bool tied_embeddings = true;
  bool qkv_bias = false;  // Qwen2 has biases on q, k and v

  int group_size() const { return n_heads / n_kv_heads; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws ModelError(source, ...) when a field is non-positive, n_heads % n_kv_heads != 0,
  // head_dim is odd, or a size is absurd (guards against hostile headers).
  void validate(const std::string& source) const;
};

}  // namespace kvevict
