#pragma once
// CUDA launchers of the ragged attention kernels (core/decode/ragged_attention_tiles.h): attention
// and column sums reading one layer of the device-resident KV cache through DeviceKvLayerView.
// No CUDA headers here: pointers are plain device pointers, launches go to the legacy default
// stream (ordered with the decoder's kernels), and nothing is synchronised or allocated.
//
// Plan on the host (plan_ragged_attention / plan_ragged_column_sums, ragged_attention_twin.h)
// from the same view, then launch as often as the view's lengths stay those of the plan. A plan
// for another layer shape is refused (UsageError); a failed launch throws RuntimeError naming the
// kernel. Each launcher mirrors its CPU twin, which the GPU test compares it with.
#include <cstddef>

#include "core/decode/ragged_attention_tiles.h"

namespace kvevict::cuda {

// Attention of n queries per query head (see ragged_attention_tiles.h for the causal rule and GQA):
//   queries [n][n_heads][head_dim] f32, out the same shape; row_max / row_sum [n][n_heads] (both
//   null or both set) receive the softmax statistics the column sums need.
//   workspace: plan.workspace_floats floats of device scratch for the chunk partials (may be null
//   when the plan does not split); workspace_floats is its size, checked.
// Split plans launch two kernels (chunks, then the merge); one-chunk plans launch one.
void ragged_attention(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan, const float* queries, float* out,
                      float* row_max, float* row_sum, float* workspace, size_t workspace_floats);

// column_sums [n_heads][plan.max_len]: per query head and entry of its stored head, the sum over
// the block's queries of the probability the entry got, from the attention's row statistics
// (recomputed tile by tile; no n x S matrix). Entries past a head's length get 0.
void ragged_column_sums(const DeviceKvLayerView& view, const RaggedColumnPlan& plan, const float* queries,
                        const float* row_max, const float* row_sum, float* column_sums);

}  // namespace kvevict::cuda
