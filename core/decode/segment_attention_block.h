#pragma once
// The segment-local attention A_seg of a prompt at one layer, made by the decoder in the prompt's
// call (ObservationRequest::segment_attention, LayerSignals::segment_attention; the A_seg signal of
// ChunkPress, NonCausalAttnPress and Compactor, core/engine/segment_observation.h for its
// definition). An observer handed it needs neither the prompt's query rows (every query of the
// prompt: 2 GiB per layer at 128K on the 8B geometry, downloaded from a device) nor, on a device,
// the cached keys on the host: the decoder hands over n_heads x S floats per layer instead.
//
// One definition, three runners:
//   block_segment_attention  the host's (the CPU decoder's; the CUDA decoder's where its cache is
//                            not resident): SegmentQueries::attention over the host cache, the
//                            engine's own computation, so the CPU path is bit for bit unchanged.
//   segment_attention_twin   the device's algorithm on the CPU: each segment's observation rows in
//                            pieces (plan_segment_attention), each piece the window attention
//                            kernel's twin (window_attention_twin.h) over a view of the segment's
//                            entries, its rows summed into the output in row order.
//   the CUDA decoder         the same pieces on the device (core/decode/cuda/segment_attention.h):
//                            the window attention kernel per piece, then sum_piece_rows.
// The twin and the device, with the same pieces, agree where the window attention kernel agrees with
// its twin (the sums are the same f32 additions in the same order); both agree with the host rule to
// the window attention twin's tolerance (tests/core/window_attention_twin_test.cpp), since each entry
// is a sum of positive probabilities. Other pieces change a few ulps (the window attention's plan
// follows its rows).
#include <cstdint>
#include <vector>

#include "core/decode/device_kv_view.h"
#include "core/decode/kv_cache.h"
#include "core/util/host_device.h"

namespace kvevict {

// What an observer asks (ObservationRequest::segment_attention): segments of `segment` positions
// from position 0, the last min(window, length) queries of each its observation queries, causal by
// position unless `causal` is false, logits scaled by 1/sqrt(head_dim) unless `scaled` is false.
struct SegmentAttentionRequest {
  int segment = 0;  // > 0: asked
  int window = 0;   // > 0
  bool causal = true;
  bool scaled = true;
  bool enabled() const { return segment > 0 && window > 0; }
  bool operator==(const SegmentAttentionRequest&) const = default;
};

// A_seg of every query head over the prompt's entries: values[h * length + p] is the sum, over the
// observation queries of position p's segment, of query head h's probability of the entry at
// original position p. Length 0: not made.
struct BlockSegmentAttention {
  int n_heads = 0;
  int length = 0;             // the prompt's length: entries at positions 0 .. length - 1
  std::vector<float> values;  // [n_heads][length]
  const float* head(int h) const { return values.data() + static_cast<size_t>(h) * static_cast<size_t>(length); }
};

// The host rule over `cache`'s layer `layer` as the block's append left it, for a prompt's call of
// `n` query rows [n][n_heads][head_dim] (post-RoPE) at positions 0 .. n - 1: the prompt is those n
// positions. Every KV head must hold exactly the positions 0 .. n - 1 in order (a prompt's call);
// std::invalid_argument otherwise, or for a request not enabled.
BlockSegmentAttention block_segment_attention(const SegmentAttentionRequest& request, const float* queries, int n,
                                              const KVCache& cache, int layer, int n_heads);

// One launch of the device algorithm: observation rows [first_row, first_row + rows) of segment
// [segment_first, segment_first + segment_length) (query positions = row indices).
struct SegmentPiece {
  int segment_first = 0, segment_length = 0;
  int first_row = 0, rows = 0;
};

// The pieces of a prompt of `n` positions, in segment order and row order within a segment, each
// piece's window attention output (n_heads x rows x segment_length floats) at most
// max_piece_floats (but at least one row). std::invalid_argument for a request not enabled or
// n < 1.
std::vector<SegmentPiece> plan_segment_attention(const SegmentAttentionRequest& request, int n, int n_heads,
                                                 size_t max_piece_floats = size_t{1} << 26);

// The view of the piece's segment: each stored head's entries segment_first .. + segment_length
// (a prompt's call: entry index = position).
DeviceKvLayerView segment_view(const DeviceKvLayerView& view, const SegmentPiece& piece);

// Whether the device algorithm applies to `view` for a prompt of `n` positions: every stored head
// exactly n long, a head_dim the window attention kernel takes, at most kDeviceKvMaxHeads heads.
// (Positions 0 .. n - 1 in order are the caller's to know: a prompt's call at position 0.)
bool segment_attention_applies(const DeviceKvLayerView& view, int n);

// Element (h, m) of a piece's sum: out[h][segment_first + m] += the piece's rows' probabilities of
// entry m, in row order. `window` is the piece's window attention output [n_kv][group][rows]
// [segment_length] (row stride segment_length), `out` the [n_heads][n] output.
KVEVICT_HOST_DEVICE inline void sum_piece_rows(const float* window, const SegmentPiece& piece, int group, int64_t n,
                                               int h, int m, float* out) {
  const int kv = h / group, g = h % group;
  const size_t len = static_cast<size_t>(piece.segment_length);
  const float* rows = window + (static_cast<size_t>(kv) * group + g) * piece.rows * len + m;
  float sum = out[static_cast<size_t>(h) * n + piece.segment_first + m];
  for (int w = 0; w < piece.rows; ++w) sum += rows[static_cast<size_t>(w) * len];
  out[static_cast<size_t>(h) * n + piece.segment_first + m] = sum;
}

// The device's algorithm on the CPU over a host view (every stored head n long, entry = position),
// queries [n][n_heads][head_dim] at positions 0 .. n - 1, n_heads = view.n_heads * group.
BlockSegmentAttention segment_attention_twin(const DeviceKvLayerView& view, int group, const float* queries, int n,
                                             const SegmentAttentionRequest& request,
                                             size_t max_piece_floats = size_t{1} << 26);

}  // namespace kvevict
