#pragma once
// A block's attention inputs as a decoder hands them to an observer that scores on the decoder's
// device (ObservationRequest::hidden_states_on_device; LayerSignals::hidden_states_on_device): the
// score programs' hidden signal of the block's own tokens, hidden[c, t] ([dim][n_tokens], t
// innermost: core/engine/policy_program.h), read by the generated kernels where it is, so neither
// the block's rows come to the host nor go back up once per head (KVzap: n_embd x T floats per head).
//
// What it holds: element (c, i) = the layer's attention input (the residual stream after the input
// RMSNorm times its weight, LayerSignals::hidden_states) at the block's token i, channel c, at
// data[c * n_tokens + i]. The values are the decoder's f32 rows, copied (no arithmetic): the same
// bits as LayerSignals::hidden_states would have carried.
// Lifetime: valid during the observer's after_layer only; the decoder reuses its buffer for the
// next layer. Memory: dim x n_tokens floats (a prompt of 32K on the 8B geometry: 512 MiB, once per
// layer instead of once per KV head).
//
// The element body below is the reference: the CPU twin runs it; the CUDA kernel
// (core/decode/cuda/hidden_states_buffer.cu) makes the same copy through shared-memory tiles.
#include <cstddef>
#include <vector>

#include "core/util/host_device.h"

namespace kvevict {

struct HiddenStatesSignal {
  const float* data = nullptr;  // [dim][n_tokens]; null: not handed over
  int dim = 0;
  int n_tokens = 0;
  bool on_device = false;  // memory of the decoder's CUDA device; host memory otherwise
  bool empty() const { return data == nullptr; }
};

// One copy: the block's rows ([n_tokens][dim], row-major) into out ([dim][n_tokens]).
struct HiddenStatesArgs {
  const float* rows = nullptr;
  float* out = nullptr;
  int n_tokens = 0;
  int dim = 0;
};

KVEVICT_HOST_DEVICE inline size_t hidden_states_floats(const HiddenStatesArgs& a) {
  return static_cast<size_t>(a.n_tokens) * static_cast<size_t>(a.dim);
}

// Output float x: channel x / n_tokens of token x % n_tokens.
KVEVICT_HOST_DEVICE inline void hidden_states_element(const HiddenStatesArgs& a, size_t x) {
  const size_t n = static_cast<size_t>(a.n_tokens);
  a.out[x] = a.rows[(x % n) * static_cast<size_t>(a.dim) + x / n];
}

// The observer's description of what `a` wrote.
inline HiddenStatesSignal describe_hidden_states(const HiddenStatesArgs& a, bool on_device) {
  return {a.out, a.dim, a.n_tokens, on_device};
}

// The CPU twin: the element body over host rows ([n_tokens][dim]) into `out` (resized), described
// as host memory. An empty block (or dim 0) gives an empty signal.
inline HiddenStatesSignal hidden_states_twin(const float* rows, int n_tokens, int dim, std::vector<float>& out) {
  if (n_tokens <= 0 || dim <= 0) return {};
  out.resize(static_cast<size_t>(n_tokens) * static_cast<size_t>(dim));
  const HiddenStatesArgs a{rows, out.data(), n_tokens, dim};
  for (size_t x = 0; x < hidden_states_floats(a); ++x) hidden_states_element(a, x);
  return describe_hidden_states(a, /*on_device=*/false);
}

}  // namespace kvevict
