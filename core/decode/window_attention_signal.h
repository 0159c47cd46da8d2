#pragma once
// The window attention of one layer as a decoder hands it to an observer
// (ObservationRequest::window_attention, LayerSignals::window_attention; docs/CUDA.md "The window
// attention in the observation"): plain data describing a buffer the decoder filled, in host or
// device memory, so that an observer reads it instead of computing its own.
//
// What it holds: for query head h = kv * group + g of the layer (the ordinary GQA map: the G query
// heads of stored head kv), window row w (the post-RoPE query of the block's token at position
// query_position0 + w; the sequence's newest W tokens) and cache entry t of stored head kv (cache order,
// the cache as handed to after_layer), the softmax over the visible entries of q . k_t / sqrt(d),
// causal by the cache's positions (entry t visible iff its position <= query_position0 + w);
// masked entries, entries at or past the head's length (up to max_len) and rows that see nothing
// are 0. Not causal (`causal` false: NACL's official proxy, ObservationRequest::
// window_attention_causal), every entry is visible. This is compute_window_attention
// (core/engine/attention_signals.h) with scaled = true; it does not serve NACL's same_index_head map.
//
// Layout: element (kv, g, w, t) at data[kv * kv_stride + g * group_stride + w * row_stride + t];
// the CUDA decoder's buffer is [n_kv][group][W][max_len] (core/decode/window_attention_tiles.h).
// Lifetime: valid during the observer's after_layer only, and only until the observer changes the
// layer's cache (a keep, a write); the decoder reuses the buffer for the next layer.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvevict {

struct WindowAttentionSignal {
  const float* data = nullptr;  // null: the decoder did not compute it (the observer computes its own)
  bool on_device = false;       // memory of the decoder's CUDA device; host memory otherwise
  bool causal = true;           // false: every entry visible to every row
  int W = 0;                    // window rows: the sequence's newest W queries
  int query_position0 = 0;      // position of row 0 (row w is at query_position0 + w)
  int group = 0;                // query heads per stored head
  int n_kv = 0;                 // stored heads of the layer
  int64_t max_len = 0;          // entries per row (>= every head's length)
  int64_t row_stride = 0, group_stride = 0, kv_stride = 0;  // in floats

  bool empty() const { return data == nullptr; }
  // Floats spanned from data (what a download copies).
  size_t floats() const {
    return n_kv == 0 ? 0 : static_cast<size_t>(n_kv - 1) * kv_stride + static_cast<size_t>(group - 1) * group_stride +
                               static_cast<size_t>(W - 1) * row_stride + static_cast<size_t>(max_len);
  }
};

// The one layout conversion: the rows of query heads first_query_head .. + n_query_heads - 1 (all
// of one stored head: h / group the same for each), their T first entries, out of `a`'s layout
// read at `data` (host memory: a.data itself, or a download of it) into out [n_query_heads][W][T],
// compute_window_attention's layout. std::invalid_argument for heads outside the signal, a group
// that spans two stored heads, or T > max_len.
void window_attention_rows(const WindowAttentionSignal& a, const float* data, int first_query_head, int n_query_heads,
                           int T, float* out);

// Copies a.floats() floats of a device signal into `host` (resized; synchronous, on the legacy
// default stream, so after the kernels that wrote it). RuntimeError in a build without CUDA, or
// when the copy fails; std::invalid_argument for a host or empty signal.
void download_window_attention(const WindowAttentionSignal& a, std::vector<float>& host);

}  // namespace kvevict
