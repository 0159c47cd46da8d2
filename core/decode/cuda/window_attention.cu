// The window attention kernel; contracts in window_attention.h. The kernel is the phase sequence
// of window_attention_tiles.h with barriers between phases; window_attention_twin.cpp runs the
// same sequence on the CPU (keep the two loops identical).
#include <cuda_runtime.h>

#include <string>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/window_attention.h"
#include "core/decode/window_attention_twin.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(WindowAttentionArgs) <= 4096, "kernel parameters");

// Block (row tile x chunk, stored head): pass 1 streams the chunk's key tiles through shared
// memory and leaves logits plus per-thread online statistics; then pass 2 normalises the block's
// rows in place (one chunk), or the block stores its chunk's (m, l) per row (split: the
// normalisation is window_chunk_kernel's, once every chunk's partial is stored).
__global__ void __launch_bounds__(kWindowThreads) window_attention_kernel(const WindowAttentionArgs a) {
  extern __shared__ float shared[];
  const WindowAttentionPlan& p = a.plan;
  const WindowBlock b = window_block(a, blockIdx.x, blockIdx.y);
  const WindowShared s = window_shared(p, shared);
  const int t = threadIdx.x;
  WindowThreadState st;
  window_load_queries(a, b, s, t);
  for (int64_t t0 = b.k0; t0 < window_keys_end(b); t0 += p.tile_keys) {
    ragged_load_tile(a.kv.keys, a.kv.type, b.base_row, p.head_dim, t0, window_keys_end(b), p.tile_keys, s.k, t,
                     kWindowThreads);
    __syncthreads();  // the key tile (and, the first time, the queries) are in
    window_scores(a, b, s, t0, t, st);
    __syncthreads();  // every reader of the tile is done before the next overwrites it
  }
  window_publish(s, t, st);
  __syncthreads();  // partials, and the logits each thread wrote to global memory, are visible
  if (p.chunks > 1) {
    window_store_chunk_partial(a, b, s, t);
  } else {
    window_normalise(a, b, s, t);
  }
}

// Split plans, after window_attention_kernel (same stream): each block normalises its chunk of
// its rows from every chunk's stored (m, l).
__global__ void __launch_bounds__(kWindowThreads) window_chunk_kernel(const WindowAttentionArgs a) {
  const WindowBlock b = window_block(a, blockIdx.x, blockIdx.y);
  window_normalise_chunk(a, b, threadIdx.x);
}

}  // namespace

void window_attention(const DeviceKvLayerView& view, const WindowAttentionPlan& plan, const float* queries, float* out,
                      size_t out_floats, float* partials, size_t partial_floats) {
  check_plan_fits(view, plan);
  if (out_floats < plan.out_floats)
    throw UsageError("window attention: the plan writes " + std::to_string(plan.out_floats) +
                     " floats of output, got " + std::to_string(out_floats));
  if (partial_floats < plan.partial_floats || (plan.partial_floats > 0 && !partials))
    throw UsageError("window attention: the plan splits its rows into " + std::to_string(plan.chunks) +
                     " chunks and needs " + std::to_string(plan.partial_floats) + " floats of partials, got " +
                     std::to_string(partials ? partial_floats : 0));
  if (plan.out_floats == 0) return;  // an empty grid is not a valid launch
  WindowAttentionArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.out = out;
  a.partials = partials;
  const dim3 grid(unsigned(plan.row_tiles) * unsigned(plan.chunks), unsigned(plan.n_kv));
  window_attention_kernel<<<grid, kWindowThreads, size_t(plan.shared_floats) * sizeof(float)>>>(a);
  cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA window_attention_kernel: ") + cudaGetErrorString(e));
  if (plan.chunks <= 1) return;
  window_chunk_kernel<<<grid, kWindowThreads>>>(a);
  e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA window_chunk_kernel: ") + cudaGetErrorString(e));
}

WindowAttentionBuffer::WindowAttentionBuffer() : data_(std::make_unique<DeviceArray<float>>()) {}

WindowAttentionBuffer::~WindowAttentionBuffer() = default;

WindowAttentionSignal WindowAttentionBuffer::fill(const DeviceKvLayerView& view, int group, const float* queries, int W,
                                                  int query_position0, bool causal) {
  WindowPlanOptions options;
  options.query_position0 = query_position0;
  options.causal = causal;
  WindowAttentionPlan plan;
  try {
    plan = plan_window_attention(view, W, group, options);
  } catch (const UsageError&) {
    return {};  // a view the kernel does not take: the observer computes its own
  }
  if (plan.out_floats == 0) return {};
  // One allocation: the output, then a split plan's partials, grown with room (DeviceArray::grow).
  data_->grow(plan.out_floats + plan.partial_floats);
  float* out = data_->data();
  window_attention(view, plan, queries, out, plan.out_floats, out + plan.out_floats, plan.partial_floats);
  return describe_window_attention(plan, out, /*on_device=*/true);
}

bool WindowAttentionBuffer::can_hold(size_t floats) const {
  // A split plan's partials are under 1% of its output (chunks of at least 1024 entries, two
  // floats each per row), so the output with grow's quarter of room covers both.
  const size_t need = floats + floats / 4;
  if (need <= data_->capacity()) return true;
  size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA window attention buffer: ") + cudaGetErrorString(e));
  return (need - data_->capacity()) * sizeof(float) <= free / 2;
}

void download_floats(const float* device, size_t floats, float* host) {
  if (floats == 0) return;
  const cudaError_t e = cudaMemcpy(host, device, floats * sizeof(float), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA download of the window attention: ") + cudaGetErrorString(e));
}

}  // namespace kvevict::cuda
