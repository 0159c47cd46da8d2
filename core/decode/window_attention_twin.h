#pragma once
// Planning ("plan on the host, run many times") and the CPU twin of the window attention kernel
// (core/decode/window_attention_tiles.h; CUDA launcher in core/decode/cuda/window_attention.h).
//
// A plan depends on (W, group, head_dim, query_position0, causal, scaled, the layer's stored heads
// and the output's row stride): build it on the host from the view (lengths live in the host-side
// struct) and pass it with the same view to the twin or the launcher, as long as no head outgrows
// the row stride. Plans are refused with UsageError naming the value when head_dim is outside
// [1, 256], the layer has no stored heads or more than kDeviceKvMaxHeads, W < 0, group < 1, a
// length is negative, the requested row stride is below the longest head, or the problem would
// not fit the kernel's int indexing (query rows, row stride, window positions past INT32_MAX).
//
// The twin runs the kernel's blocks one after another, each block phase by phase for every thread
// (the kernel's __syncthreads), with the same shared-memory layout; it is single-threaded and
// meant for tests.
#include <cstdint>
#include <vector>

#include "core/decode/window_attention_signal.h"
#include "core/decode/window_attention_tiles.h"

namespace kvevict {

struct WindowPlanOptions {
  int query_position0 = 0;  // position of window row 0 (rows are at query_position0 + w)
  bool causal = true;
  bool scaled = true;       // scale 1/sqrt(head_dim); 1 when false
  // The output's row stride; 0: the longest head. A larger stride lets one plan (and one output
  // buffer) serve while heads grow up to it.
  int64_t max_len = 0;
  // Splitting rows along the cache (window_attention_tiles.h): blocks the planner aims at (about
  // 2 waves of 4 blocks on each of an H100/H200's 132 SMs, as the ragged attention's); chunks
  // split a row only when row tiles x stored heads fall short of it, each of at least min_chunk
  // entries, at most max_chunks per row.
  int target_blocks = 1024;
  int64_t min_chunk = 1024;
  int max_chunks = 256;
  // Entries per chunk when > 0 (rounded up to a multiple of the key tile): tests force splits.
  int64_t chunk = 0;
};

// The plan for W window rows per query head (n_heads = view.n_heads * group).
WindowAttentionPlan plan_window_attention(const DeviceKvLayerView& view, int W, int group,
                                          const WindowPlanOptions& options = {});

// Refuse (UsageError) running `plan` over `view`: a plan made for another layer shape, or a head
// longer than the plan's row stride. The twin and the CUDA launcher both check with it first.
void check_plan_fits(const DeviceKvLayerView& view, const WindowAttentionPlan& plan);

// Runs the plan over host arenas (the view's pointers must be host memory); queries
// [W][n_heads][head_dim]. Returns A as [n_kv][group][W][max_len] (window_attention_tiles.h); a
// split plan's partials live in a buffer of its own for the call.
std::vector<float> window_attention_twin(const DeviceKvLayerView& view, const WindowAttentionPlan& plan,
                                         const float* queries);

// The observer's description (window_attention_signal.h) of an output `plan` wrote at `data`
// ([n_kv][group][W][max_len]), in device or host memory, causal or not as planned. The signal's
// contract is scaled: std::invalid_argument for a plan that is not.
WindowAttentionSignal describe_window_attention(const WindowAttentionPlan& plan, const float* data, bool on_device);

}  // namespace kvevict
