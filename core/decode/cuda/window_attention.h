#pragma once
// CUDA launcher of the window attention kernel (core/decode/window_attention_tiles.h): the window
// attention signal A of one layer, read from the device-resident KV cache through
// DeviceKvLayerView and written to device memory, so the scoring kernels can read it in place.
// No CUDA headers here: pointers are plain device pointers, the launch goes to the legacy default
// stream (ordered with the decoder's kernels), and nothing is synchronised or allocated.
//
// Plan on the host (plan_window_attention, window_attention_twin.h) from the same view, then
// launch as often as no head outgrows the plan's row stride. A plan for another layer shape or a
// too-small output is refused (UsageError); a failed launch throws RuntimeError naming the kernel.
// The launcher mirrors its CPU twin, which the GPU test compares it with.
#include <cstddef>
#include <memory>

#include "core/decode/window_attention_signal.h"
#include "core/decode/window_attention_tiles.h"

namespace kvevict::cuda {

// queries [W][n_heads][head_dim] f32 (device); out [n_kv][group][W][plan.max_len] f32 (device),
// out_floats its size (checked against plan.out_floats). Every element of the output is written
// (zeros past each head's length). A plan split along the cache (plan.chunks > 1) launches two
// kernels and needs plan.partial_floats floats of device scratch in `partials` (checked; may be
// null otherwise). Launches nothing when the output is empty (W == 0 or every head empty with
// row stride 0).
void window_attention(const DeviceKvLayerView& view, const WindowAttentionPlan& plan, const float* queries, float* out,
                      size_t out_floats, float* partials = nullptr, size_t partial_floats = 0);

// The CUDA decoder's window attention for its observer (ObservationRequest::window_attention): one
// device output buffer, grown as needed by a quarter more (never shrunk, freed on destruction),
// reused layer after layer. fill plans over `view` (causal, scaled, row stride = the longest head), launches, and
// returns the signal describing the buffer (device memory, [n_kv][group][W][max_len], causal or
// not: every entry visible); an empty
// signal when the planner refuses the view (head_dim past 256, too many heads, ...: the observer
// then computes its own) or there is nothing to write. queries: the W window rows, [W][n_heads]
// [head_dim] f32 on the device.
template <typename T>
class DeviceArray;  // device_memory.h (CUDA headers)

class WindowAttentionBuffer {
 public:
  WindowAttentionBuffer();
  ~WindowAttentionBuffer();
  WindowAttentionBuffer(const WindowAttentionBuffer&) = delete;
  WindowAttentionBuffer& operator=(const WindowAttentionBuffer&) = delete;
  WindowAttentionSignal fill(const DeviceKvLayerView& view, int group, const float* queries, int W,
                             int query_position0, bool causal = true);
  // Whether an output of `floats` floats (and a split's partials) fits: the buffer holds it, or
  // what it must grow by is at most half the device's free memory. A caller that must not fail
  // mid-call (a decoder leaving its rows on the device) asks before the call. RuntimeError when
  // the device cannot say.
  bool can_hold(size_t floats) const;

 private:
  std::unique_ptr<DeviceArray<float>> data_;  // the output, then a split plan's partials
};

// Synchronous copy of `floats` floats from device memory (the legacy default stream, so after every
// kernel launched before it) into host memory. RuntimeError when the copy fails.
void download_floats(const float* device, size_t floats, float* host);

}  // namespace kvevict::cuda
