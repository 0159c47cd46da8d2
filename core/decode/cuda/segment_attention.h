#pragma once
// CUDA runner of the segment-local attention A_seg of a prompt at one layer (core/decode/
// segment_attention_block.h): the CUDA decoder's answer to ObservationRequest::segment_attention
// where its cache is resident. The algorithm is segment_attention_twin's, step for step: the pieces
// of plan_segment_attention, each the window attention kernel (core/decode/cuda/window_attention.h)
// over segment_view of the device cache, its rows summed into a device [n_heads][n] output by
// sum_piece_rows (one thread per element, rows in order), then one download. Launches go to the
// legacy default stream, ordered with the decoder's kernels.
// tests/core/segment_attention_gpu_test.cpp compares it with the twin.
#include <cstddef>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/segment_attention_block.h"

namespace kvevict::cuda {

// Device scratch reused layer after layer (a piece's window attention, a split plan's partials, the
// output): grown as needed, never shrunk, freed on destruction.
class SegmentAttentionBuffer {
 public:
  // A_seg of the prompt whose n entries every stored head of `view` (device memory) holds at
  // positions 0 .. n - 1, from its query rows [n][view.n_heads * group][head_dim] f32 in device
  // memory. Equal to segment_attention_twin with the same max_piece_floats wherever the window
  // attention kernel equals its twin. UsageError when segment_attention_applies is false or the
  // request is not enabled; RuntimeError when a launch or the download fails.
  BlockSegmentAttention compute(const DeviceKvLayerView& view, int group, const float* queries, int n,
                                const SegmentAttentionRequest& request, size_t max_piece_floats = size_t{1} << 26);
  // Whether compute's scratch for a prompt of n positions and n_heads query heads (the largest
  // piece's window attention, the output, each with grow's quarter of room; a split plan's partials
  // are under 1% of its output) is held already or fits in half of the device's free memory: the
  // CUDA decoder asks before a call (serves_segment_attention), so a card too full for it takes the
  // host rule instead of running out mid-call, as WindowAttentionBuffer::can_hold. RuntimeError
  // when the device cannot say.
  bool can_hold(const SegmentAttentionRequest& request, int n, int n_heads,
                size_t max_piece_floats = size_t{1} << 26) const;

 private:
  DeviceArray<float> window_;  // a piece's window attention, then its partials
  DeviceArray<float> out_;     // [n_heads][n]
};

}  // namespace kvevict::cuda
