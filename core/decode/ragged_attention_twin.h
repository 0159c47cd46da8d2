#pragma once
// Planning ("plan on the host, run many times") and the CPU twin of the ragged attention kernels
// (core/decode/ragged_attention_tiles.h; CUDA launchers in core/decode/cuda/ragged_attention.h).
//
// A plan depends on (n, group, head_dim, the layer's stored heads and their lengths): build it
// once per layer call on the host from the view (lengths live in the host-side struct) and pass
// it with the same view to the twin or the launcher. Plans are refused with UsageError naming the
// value when head_dim is outside [1, 256], there are more than 128 stored heads, n < 1, group < 1,
// a length is negative, or the problem would not fit the kernels' int indexing.
//
// The twin runs the kernels' blocks one after another, each block phase by phase for every
// thread (the kernels' __syncthreads), with the same shared-memory layout, then the merge pass;
// it is slow (single thread) and meant for tests and the benchmark's --cpu check.
#include <cstdint>
#include <vector>

#include "core/decode/ragged_attention_tiles.h"

namespace kvevict {

struct RaggedPlanOptions {
  // Blocks the planner aims at (about 2 waves of 4 blocks on each of an H100/H200's 132 SMs);
  // chunks split a head only when row tiles x stored heads fall short of it.
  int target_blocks = 1024;
  int64_t min_chunk = 256;  // smaller chunks cost more merge traffic than they win in parallelism
  int max_chunks = 1024;    // bounds the partials' workspace
  // Entries per chunk when > 0 (rounded up to a multiple of the tile): tests force splits with it.
  int64_t chunk = 0;
};

// The attention plan for a block of n queries per query head (n_heads = view.n_heads * group).
RaggedAttentionPlan plan_ragged_attention(const DeviceKvLayerView& view, int n, int group,
                                          const RaggedPlanOptions& options = {});
// The column-sums plan; max_len (the output's row stride) must cover every head's length.
RaggedColumnPlan plan_ragged_column_sums(const DeviceKvLayerView& view, int n, int group, int max_len);

// Refuse (UsageError) running `plan` over `view`: a plan made for another layer shape, or a head
// longer than the plan covers (the view's heads grew since it was planned). The twin and the CUDA
// launchers both check with these before anything runs.
void check_plan_fits(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan);
void check_plan_fits(const DeviceKvLayerView& view, const RaggedColumnPlan& plan);

// Outputs of the attention: out [n][n_heads][head_dim], row_max / row_sum [n][n_heads].
struct RaggedAttentionOutput {
  std::vector<float> out, row_max, row_sum;
};
// Runs the plan over host arenas (the view's pointers must be host memory).
RaggedAttentionOutput ragged_attention_twin(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan,
                                            const float* queries);
// column_sums [n_heads][max_len] from the attention's row statistics.
std::vector<float> ragged_column_sums_twin(const DeviceKvLayerView& view, const RaggedColumnPlan& plan,
                                           const float* queries, const float* row_max, const float* row_sum);

}  // namespace kvevict
