// Kernels of the ragged attention; contracts in ragged_attention.h. The kernels are the phase
// sequences of ragged_attention_tiles.h with barriers between phases; ragged_attention_twin.cpp
// runs the same sequences on the CPU (keep the two loops identical).
#include <cuda_runtime.h>

#include <string>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/ragged_attention.h"
#include "core/decode/ragged_attention_twin.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(RaggedAttentionArgs) <= 4096 && sizeof(RaggedColumnArgs) <= 4096, "kernel parameters");

void check_launch(const char* kernel) {
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA ") + kernel + ": " + cudaGetErrorString(e));
}

// Block (row tile, chunk, stored head): key tiles through shared memory with an online softmax.
__global__ void __launch_bounds__(kRaggedThreads) ragged_attention_kernel(const RaggedAttentionArgs a) {
  extern __shared__ float shared[];
  const RaggedAttentionPlan& p = a.plan;
  const RaggedBlock b = ragged_block(a, blockIdx.x, blockIdx.y, blockIdx.z);
  const RaggedShared s = ragged_shared(p, shared);
  const int t = threadIdx.x;
  RaggedThreadState st;
  ragged_load_queries(a, b, s, t);
  for (int64_t t0 = b.begin; t0 < b.end; t0 += p.tile_keys) {
    ragged_load_tile(a.kv.keys, a.kv.type, b.base_row, p.head_dim, t0, b.end, p.tile_keys, s.k, t, kRaggedThreads);
    __syncthreads();
    ragged_scores(a, b, s, t0, t);
    __syncthreads();
    ragged_rescale(p, s, t, st);  // reads scores only, so the value tile may overwrite the keys
    ragged_load_tile(a.kv.values, a.kv.type, b.base_row, p.head_dim, t0, b.end, p.tile_keys, s.k, t, kRaggedThreads);
    __syncthreads();
    ragged_weights(p, s, t, st);  // each row's weights are written by the row's own threads
    __syncthreads();
    ragged_accumulate(p, s, t, st);
    __syncthreads();
  }
  ragged_epilogue(a, b, t, st);
}

// One block per (query, query head): combines the chunks' partials.
__global__ void __launch_bounds__(kRaggedThreads) ragged_merge_kernel(const RaggedAttentionArgs a) {
  const int qh = blockIdx.x;
  ragged_merge(a, qh / a.plan.n_heads, qh % a.plan.n_heads, threadIdx.x, blockDim.x);
}

// Block (key tile, stored head), one thread per entry; query tiles stream through shared memory.
__global__ void ragged_column_sums_kernel(const RaggedColumnArgs a) {
  extern __shared__ float shared[];
  const RaggedColumnPlan& p = a.plan;
  const RaggedColumnShared s = ragged_column_shared(p, shared);
  const int kv = blockIdx.y, t = threadIdx.x;
  const int64_t len = a.kv.length[kv], t0 = int64_t(blockIdx.x) * p.tile_keys;
  ragged_load_tile(a.kv.keys, a.kv.type, a.kv.base_row[kv], p.head_dim, t0, len, p.tile_keys, s.k, t, p.tile_keys);
  for (int h = kv * p.group; h < (kv + 1) * p.group; ++h) {  // the key tile serves the whole group
    float sum = 0.0f;
    for (int i0 = ragged_first_query(len, p.n, t0); i0 < p.n; i0 += kRaggedQueryTile) {
      __syncthreads();  // the key tile is in; the previous query tile's readers are done
      ragged_column_load_queries(a, h, i0, s.q, s.stats, t);
      __syncthreads();
      sum += ragged_column_accumulate(p, len, t0 + t, i0, s.k, s.q, s.stats, t);
    }
    ragged_column_store(a, h, t0 + t, len, sum);
  }
}

}  // namespace

void ragged_attention(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan, const float* queries, float* out,
                      float* row_max, float* row_sum, float* workspace, size_t workspace_floats) {
  check_plan_fits(view, plan);
  if (plan.split() && (workspace == nullptr || workspace_floats < plan.workspace_floats))
    throw UsageError("ragged attention: the plan needs " + std::to_string(plan.workspace_floats) +
                     " floats of workspace, got " + std::to_string(workspace == nullptr ? 0 : workspace_floats));
  if ((row_max == nullptr) != (row_sum == nullptr))
    throw UsageError("ragged attention: row_max and row_sum must both be set or both be null");
  RaggedAttentionArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.out = out;
  a.row_max = row_max;
  a.row_sum = row_sum;
  a.workspace = workspace;
  const dim3 grid(unsigned(plan.row_tiles), unsigned(plan.max_chunks), unsigned(plan.n_kv));
  ragged_attention_kernel<<<grid, kRaggedThreads, size_t(plan.shared_floats) * sizeof(float)>>>(a);
  check_launch("ragged_attention_kernel");
  if (!plan.split()) return;
  ragged_merge_kernel<<<unsigned(size_t(plan.n) * plan.n_heads), kRaggedThreads>>>(a);
  check_launch("ragged_merge_kernel");
}

void ragged_column_sums(const DeviceKvLayerView& view, const RaggedColumnPlan& plan, const float* queries,
                        const float* row_max, const float* row_sum, float* column_sums) {
  check_plan_fits(view, plan);
  RaggedColumnArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.row_max = row_max;
  a.row_sum = row_sum;
  a.column_sums = column_sums;
  const dim3 grid(unsigned(plan.key_tiles), unsigned(plan.n_kv));
  ragged_column_sums_kernel<<<grid, unsigned(plan.tile_keys), size_t(plan.shared_floats) * sizeof(float)>>>(a);
  check_launch("ragged_column_sums_kernel");
}

}  // namespace kvevict::cuda
