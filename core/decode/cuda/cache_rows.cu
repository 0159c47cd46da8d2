// The cached rows kernel; contracts in cache_rows.h and core/decode/cache_rows_signal.h (whose
// element body cache_rows_twin runs on the CPU).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/decode/cuda/cache_rows.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/launch_status.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kCacheRowsThreads = 256;

// Arguments travel by value (parameter space, at most 4 KiB on every architecture we build for).
static_assert(sizeof(CacheRowsArgs) <= 4096, "kernel parameters");

// One thread per output float: consecutive threads write consecutive entries of one dimension.
__global__ void cache_rows_kernel(const CacheRowsArgs args, size_t count) {
  const size_t x = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (x < count) cache_rows_element(args, x);
}

// One thread per entry: its key's and value's norms.
__global__ void cache_row_norms_kernel(const CacheRowsArgs args, size_t count) {
  const size_t e = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (e < count) cache_rows_norm_element(args, e);
}

constexpr int kOutNormThreads = 128;

// Projected value norms: block (x, y) takes entries x * 128 .. of stored head y / group for query
// y % group of its group (a block past its head's length returns at once, as a whole).
__global__ void cache_out_norms_kernel(const CacheRowsArgs a) {
  __shared__ float w[kProjectedValueChunk * kProjectedValueMaxHeadDim];
  const int group = a.projection.group, d = a.head_dim, dim = a.projection.dim;
  const int h = int(blockIdx.y) / group, g = int(blockIdx.y) % group, q = h * group + g;
  const int64_t length = a.ranges.out_offset[h + 1] - a.ranges.out_offset[h];
  const int64_t first = int64_t(blockIdx.x) * blockDim.x;
  if (first >= length) return;
  const int64_t t = first + threadIdx.x;
  const bool live = t < length;
  const int64_t row = a.ranges.start_row[h] + t;
  double l1 = 0;
  for (int i0 = 0; i0 < dim; i0 += kProjectedValueChunk) {
    const int n = min(kProjectedValueChunk, dim - i0);
    __syncthreads();  // the previous pass has read w
    for (int k = threadIdx.x; k < kProjectedValueChunk * d; k += blockDim.x)
      w[k] = k / d < n ? projection_load(a.projection, q, i0 + k / d, k % d) : 0.0f;
    __syncthreads();
    if (!live) continue;
    double dot[kProjectedValueChunk];
#pragma unroll
    for (int j = 0; j < kProjectedValueChunk; ++j) dot[j] = 0;
    for (int b = 0; b < d; ++b) {
      const double v = device_kv_load(a.values, a.type, row, d, b);
#pragma unroll
      for (int j = 0; j < kProjectedValueChunk; ++j) dot[j] = fma(static_cast<double>(w[j * d + b]), v, dot[j]);
    }
#pragma unroll
    for (int j = 0; j < kProjectedValueChunk; ++j)
      if (j < n) l1 += fabs(dot[j]);
  }
  if (live) a.out_norms_l1_out[group * a.ranges.out_offset[h] + g * length + t] = float(l1);
}

// Launches `kernel` over `count` threads (none for an empty grid, which is not a valid launch).
template <typename Kernel>
void launch(Kernel kernel, const CacheRowsArgs& a, size_t count, const char* name) {
  if (count == 0) return;
  const unsigned blocks = unsigned((count + kCacheRowsThreads - 1) / kCacheRowsThreads);
  kernel<<<blocks, kCacheRowsThreads>>>(a, count);
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA ") + name + ": " + cudaGetErrorString(e));
}

}  // namespace

CacheRowsBuffer::CacheRowsBuffer()
    : keys_(std::make_unique<DeviceArray<float>>()),
      values_(std::make_unique<DeviceArray<float>>()),
      keys_pre_rope_(std::make_unique<DeviceArray<float>>()),
      norms_(std::make_unique<DeviceArray<float>>()),
      out_norms_l1_(std::make_unique<DeviceArray<float>>()) {}

CacheRowsBuffer::~CacheRowsBuffer() = default;

CacheRowsSignal CacheRowsBuffer::fill(const DeviceKvLayerView& view, CacheRowsWanted wanted, const RopeTableView& rope,
                                      const OutputProjectionView& projection) {
  if (!wanted.any()) return {};
  CacheRowsArgs a = plan_cache_rows(view, nullptr, nullptr);
  const size_t n = cache_rows_floats(a), entries = cache_rows_entries(a);
  // A quarter's room as they grow: the decode steps' heads grow one entry at a time.
  if (wanted.keys) keys_->grow(n);
  if (wanted.values) values_->grow(n);
  if (wanted.norms) norms_->grow(2 * entries);
  if (wanted.keys_pre_rope) {
    keys_pre_rope_->grow(n);
    plan_cache_keys_pre_rope(a, view, rope, keys_pre_rope_->data());
  }
  a.keys_out = wanted.keys ? keys_->data() : nullptr;
  a.values_out = wanted.values ? values_->data() : nullptr;
  a.key_norms_out = wanted.norms ? norms_->data() : nullptr;
  a.value_norms_out = wanted.norms ? norms_->data() + entries : nullptr;
  if (wanted.any_rows()) launch(cache_rows_kernel, a, n, "cache_rows_kernel");
  if (wanted.norms) launch(cache_row_norms_kernel, a, entries, "cache_row_norms_kernel");
  if (wanted.out_norms_l1) {
    plan_cache_out_norms_l1(a, projection, nullptr);
    out_norms_l1_->grow(cache_rows_out_norms(a));
    a.out_norms_l1_out = out_norms_l1_->data();
    int64_t longest = 0;
    for (int h = 0; h < a.ranges.n_heads; ++h) longest = std::max(longest, a.ranges.out_offset[h + 1] - a.ranges.out_offset[h]);
    if (longest > 0) {
      const dim3 grid(unsigned((longest + kOutNormThreads - 1) / kOutNormThreads), unsigned(a.ranges.n_heads * projection.group));
      cache_out_norms_kernel<<<grid, kOutNormThreads>>>(a);
      const cudaError_t e = launch_status();
      if (e != cudaSuccess) throw RuntimeError(std::string("CUDA cache_out_norms_kernel: ") + cudaGetErrorString(e));
    }
  }
  return describe_cache_rows(a, /*on_device=*/true);
}

}  // namespace kvevict::cuda
