#pragma once
// Model weights as the CPU decoder consumes them, matrices stored [out][in] (y = W x).
//
// Two storages, chosen at load (LoadOptions::weights):
//   - f32: every tensor dequantised to float32 into the std::vector<float> members (the reference path).
//   - native (default): matrices whose file type is not F32 stay in their file format (F16, BF16,
//     Q4_0, Q4_1, Q8_0, Q4_K, Q6_K) as a TypedMatrix pointing into the mapped file, which `storage`
//     keeps alive; their f32 vector stays empty. Norms, biases and F32 matrices are always f32.
// Readers go through Weights::matrix(...) (or the *_matrix helpers), which return the native matrix
// when there is one and an F32 view of the vector otherwise, so both storages read the same way.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvevict {

// A row-major [rows][cols] matrix in a ggml type; every row is row_bytes bytes of whole blocks.
// Non-owning: the bytes belong to Weights::storage (or to an f32 vector of Weights).
struct TypedMatrix {
  uint32_t type = 0;  // GgmlType id; 0 = F32
  int rows = 0;
  int cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int r) const { return data + static_cast<size_t>(r) * row_bytes; }
  size_t bytes() const { return static_cast<size_t>(rows) * row_bytes; }
  static TypedMatrix f32(const std::vector<float>& v, int rows, int cols) {
    return {0, rows, cols, static_cast<size_t>(cols) * sizeof(float), reinterpret_cast<const uint8_t*>(v.data())};
  }
};

// The native (file-format) matrices of one layer; empty members are f32 (see LayerWeights).
struct NativeLayer {
  TypedMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

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
  std::vector<float> token_embedding;  // [vocab][dim]; empty when native_embedding is set
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;       // [dim]
  std::vector<float> output;           // [vocab][dim]; empty when tied to token_embedding (or native)

  // Native storage (empty in f32 mode). native_layers is empty or has one entry per layer.
  std::vector<NativeLayer> native_layers;
  TypedMatrix native_embedding;
  TypedMatrix native_output;            // empty when tied or f32
  std::shared_ptr<const void> storage;  // the mapped file the native matrices point into

  const std::vector<float>& output_matrix() const { return output.empty() ? token_embedding : output; }

  // The matrix `f32` [rows][cols] or its native counterpart when there is one.
  static TypedMatrix matrix(const std::vector<float>& f32, const TypedMatrix& native, int rows, int cols) {
    return native.empty() ? TypedMatrix::f32(f32, rows, cols) : native;
  }
  TypedMatrix embedding_matrix(int vocab, int dim) const { return matrix(token_embedding, native_embedding, vocab, dim); }
  TypedMatrix classifier_matrix(int vocab, int dim) const {
    if (!output.empty() || !native_output.empty()) return matrix(output, native_output, vocab, dim);
    return embedding_matrix(vocab, dim);
  }
  bool has_native() const {
    if (!native_embedding.empty() || !native_output.empty()) return true;
    for (const NativeLayer& l : native_layers) {
      for (const TypedMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        if (!m->empty()) return true;
      }
    }
    return false;
  }
};

}  // namespace kvevict
