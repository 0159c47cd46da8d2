#pragma once
// Per-layer quantities the decoder hands an observer on request (ObservationRequest::hidden_norms,
// output_grams) for the model signals hidden_norm and out_norm (core/engine/model_signals.h).
// One implementation for every decoder backend: both are computed on the host from host data.
#include <vector>

#include "core/decode/decoder.h"
#include "core/model/weights.h"

namespace kvevict {

// out[i] = ||rows[i]||_2 for the n rows of `width` floats, accumulated in double.
void hidden_state_norms(const float* rows, int n, int width, float* out);

// The Gram matrix of each query head's slice of the output projection: wo is W_o, [dim][n_heads *
// head_dim] (rows = output features), and W_o,h its columns h*head_dim .. h*head_dim + head_dim - 1,
// so that the attention output of head h contributes W_o,h o_h to the residual stream. Returns
// [n_heads][head_dim][head_dim] with G_h = W_o,h^T W_o,h (accumulated in double over the dim rows),
// hence ||W_o,h v|| = sqrt(v^T G_h v) for any value vector v. Cost dim * n_heads * head_dim^2, once
// per layer (the decoder keeps the result); size n_heads * head_dim^2 floats = head_dim / dim of W_o.
std::vector<float> output_projection_grams(const TypedMatrix& wo, int n_heads, int head_dim);

// W_o split per query head, dequantised to float: [n_heads][dim][head_dim], slice h = the columns
// h*head_dim .. h*head_dim + head_dim - 1 of W_o, so ||W_o,h v||_1 can be computed for a value v.
// Size dim * n_heads * head_dim floats (W_o itself); `out` is resized.
void output_projection_slices(const TypedMatrix& wo, int n_heads, int head_dim, std::vector<float>& out);

// The W_o signals an observer asked for (ObservationRequest::output_grams, output_projection), as
// every decoder hands them over: layer `layer`'s Grams (made at its first request, then kept) and
// its slices (remade into one buffer per call), from `wo`, the layer's W_o on the host, set in
// `signals` (valid while this object and the call last).
class OutputProjectionSignals {
 public:
  // Whether `request` asks for either (then the caller makes `wo` for hand_over).
  static bool requested(const ObservationRequest& request) { return request.output_grams || request.output_projection; }
  void hand_over(const ObservationRequest& request, const TypedMatrix& wo, int layer, int n_layers, int n_heads,
                 int head_dim, LayerSignals& signals);

 private:
  std::vector<std::vector<float>> grams_;  // [layer]
  std::vector<float> slices_;              // the current call's layer
};

}  // namespace kvevict
