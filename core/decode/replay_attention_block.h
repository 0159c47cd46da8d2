#pragma once
// KVzip's replay attention of one layer for one replay chunk (core/engine/replay_pass.h: the
// A_replay signal), made by the decoder in the replay's call (ObservationRequest::replay_attention,
// LayerSignals::replay_attention). An observer handed it needs neither the replay's query rows nor
// the cached keys on the host: on a device the decoder hands over n_heads x chunk floats per layer
// instead of bringing the whole cache to the host for every chunk's forward (16 forwards at 32K, each
// a host attention of about 52 GFLOP per layer and chunk on the 8B geometry, from the shapes).
//
// Definition (kvpress's score_kvzip). The replay call feeds R tokens at positions context ..
// context + R - 1 after the prefilled context (cache index = position in every KV head). Query row i
// of query head h takes the softmax of its scaled logits over the entries
//   the sinks [0, sinks), the chunk [first, end), the replay's own [context, context + i]
// (causal among the replay tokens), and entry u of the chunk scores
//   values[h][u] = max over i of p_i(first + u) * f_i
// with f_i = 1 / ||x_i|| (x_i: the row's attention input, the layer input after its RMSNorm; KVzip+'s
// row factor) when hidden_normalised, else 1; 0 when R is 0.
//
// One definition, three runners (as segment_attention_block.h):
//   block_replay_attention  the host's (the CPU decoder's; the CUDA decoder's where it cannot run
//                           the device's): the loop replay_pass.cpp ran inside its observer, moved
//                           here unchanged, so the CPU path keeps its bits.
//   replay_attention_twin   the device's algorithm on the CPU: the sinks, the chunk and the replay
//                           entries of every KV head gathered into rows of their own
//                           (replay_gather_element), the window attention kernel's twin over them
//                           with the replay rows as its causal window (window_attention_twin.h), in
//                           pieces of rows (plan_replay_attention), each piece's probabilities folded
//                           into the maxima (replay_max_piece_rows).
//   the CUDA decoder        the same steps on the device (core/decode/cuda/replay_attention.h).
// Twin and device agree where the window attention kernel agrees with its twin (a max is exact; the
// factor is one f32 product); both agree with the host rule to the window attention twin's
// tolerance (the host normalises in double).
#include <cstdint>
#include <vector>

#include "core/decode/device_kv_view.h"
#include "core/decode/kv_cache.h"
#include "core/util/host_device.h"

namespace kvevict {

// What an observer asks (ObservationRequest::replay_attention) of the call that feeds a replay input
// after a context of `context` entries: the maxima over the chunk [first, end), the softmax also
// covering the sinks [0, sinks) (replay_pass.h: min(n_sink, first)).
struct ReplayAttentionRequest {
  int context = 0;            // > 0: asked; the call must start at this position
  int first = 0, end = 0;     // the chunk, 0 <= first < end <= context
  int sinks = 0;              // 0 <= sinks <= first
  bool hidden_normalised = false;  // KVzip+'s row factor (the decoder reads the rows' attention inputs)
  bool enabled() const { return context > 0; }
  int chunk() const { return end - first; }
  bool operator==(const ReplayAttentionRequest&) const = default;
};

// The maxima of every query head over the chunk: values[h * length + u] for the entry at position
// first + u. Length 0: not made.
struct BlockReplayAttention {
  int n_heads = 0;
  int first = 0;
  int length = 0;
  std::vector<float> values;  // [n_heads][length]
  const float* head(int h) const { return values.data() + static_cast<size_t>(h) * static_cast<size_t>(length); }
};

// std::invalid_argument unless the request is enabled and its chunk and sinks lie as described.
void check_replay_attention_request(const ReplayAttentionRequest& request);

// KVzip+'s row factors f_i = 1 / ||x_i|| (0 for a zero row) of `rows` attention inputs of `dim`
// floats, accumulated in double; empty when the request is not hidden_normalised. std::logic_error
// when hidden_normalised and `hidden` does not hold rows x dim floats (dim > 0).
std::vector<double> replay_row_factors(const ReplayAttentionRequest& request, const float* hidden, size_t hidden_floats,
                                       int rows);

// The host rule over `cache`'s layer `layer` as the replay block's append left it, from the block's
// R query rows [R][n_heads][head_dim] (post-RoPE) and the row factors (replay_row_factors: empty, or
// R of them). Every KV head must hold context + R entries; std::invalid_argument otherwise, or for
// a request check_replay_attention_request refuses.
BlockReplayAttention block_replay_attention(const ReplayAttentionRequest& request, const float* queries, int R,
                                            const std::vector<double>& factors, const KVCache& cache, int layer,
                                            int n_heads);

// The entries each KV head's gathered rows hold: the sinks, the chunk, the R replay entries.
inline int replay_gathered_rows(const ReplayAttentionRequest& request, int R) {
  return request.sinks + request.chunk() + R;
}

// The cache entry gathered row j of a head holds.
KVEVICT_HOST_DEVICE inline int64_t replay_gather_source(const ReplayAttentionRequest& request, int j) {
  if (j < request.sinks) return j;
  if (j < request.sinks + request.end - request.first) return request.first + (j - request.sinks);
  return request.context + (j - request.sinks - (request.end - request.first));
}

// Element i of gathered row j of stored head kv (i = -1: its position): the word of `view`'s
// source row copied into `keys` (the view's type, rows of head_dim, head kv's rows from kv * m) and
// `positions` (m = replay_gathered_rows). The device and the twin copy the same words.
KVEVICT_HOST_DEVICE inline void replay_gather_element(const DeviceKvLayerView& view, const ReplayAttentionRequest& request,
                                                      int m, int kv, int j, int i, void* keys, int32_t* positions) {
  const int64_t source = view.base_row[kv] + replay_gather_source(request, j);
  const int64_t row = static_cast<int64_t>(kv) * m + j;
  if (i < 0) {
    positions[row] = view.positions[source];
    return;
  }
  const size_t to = static_cast<size_t>(row) * view.head_dim + i;
  const size_t from = static_cast<size_t>(source) * view.head_dim + i;
  if (view.type == KvType::F32) static_cast<float*>(keys)[to] = static_cast<const float*>(view.keys)[from];
  else static_cast<uint16_t*>(keys)[to] = static_cast<const uint16_t*>(view.keys)[from];
}

// The view of the gathered rows (keys and positions as replay_gather_element wrote them; no values:
// the window attention reads none).
DeviceKvLayerView replay_gathered_view(const DeviceKvLayerView& view, int m, const void* keys,
                                       const int32_t* positions);

// One window attention launch: replay rows [first_row, first_row + rows).
struct ReplayPiece {
  int first_row = 0, rows = 0;
};

// The pieces of R replay rows, each piece's window attention output (n_heads x rows x m floats, m =
// replay_gathered_rows) at most max_piece_floats (but at least one row). Empty when R is 0.
std::vector<ReplayPiece> plan_replay_attention(const ReplayAttentionRequest& request, int R, int n_heads,
                                               size_t max_piece_floats = size_t{1} << 26);

// Whether the device algorithm applies to `view` for a replay block of R rows: every stored head
// context + R long, positions present, a head_dim the window attention kernel takes, at most
// kDeviceKvMaxHeads heads, and a request check_replay_attention_request accepts.
bool replay_attention_applies(const DeviceKvLayerView& view, const ReplayAttentionRequest& request, int R);

// Element (h, u) of a piece's fold: out[h][u] = the larger of itself and each of the piece's rows'
// probability of chunk entry u times its row factor (`factors`: R floats, or null for 1), rows in
// order. `window` is the piece's window attention output [n_kv][group][rows][m], `out` [n_heads][chunk].
KVEVICT_HOST_DEVICE inline void replay_max_piece_rows(const float* window, const ReplayPiece& piece, int group, int m,
                                                      const ReplayAttentionRequest& request, const float* factors,
                                                      int h, int u, float* out) {
  const int kv = h / group, g = h % group, chunk = request.end - request.first;
  const float* rows = window + (static_cast<size_t>(kv) * group + g) * piece.rows * static_cast<size_t>(m) +
                      request.sinks + u;
  float best = out[static_cast<size_t>(h) * chunk + u];
  for (int w = 0; w < piece.rows; ++w) {
    float p = rows[static_cast<size_t>(w) * m];
    if (factors) p *= factors[piece.first_row + w];
    best = best < p ? p : best;
  }
  out[static_cast<size_t>(h) * chunk + u] = best;
}

// The device's algorithm on the CPU over a host view (replay_attention_applies), queries
// [R][n_heads][head_dim] at positions context .. context + R - 1, n_heads = view.n_heads * group;
// `factors`: the row factors as f32 (R of them), or null.
BlockReplayAttention replay_attention_twin(const DeviceKvLayerView& view, int group, const float* queries, int R,
                                           const ReplayAttentionRequest& request, const float* factors,
                                           size_t max_piece_floats = size_t{1} << 26);

}  // namespace kvevict
