// The cached rows kernel; contracts in cache_rows.h and core/decode/cache_rows_signal.h (whose
// element body cache_rows_twin runs on the CPU).
#include <cuda_runtime.h>

#include <string>

#include "core/decode/cuda/cache_rows.h"
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

// `buffer` holds at least `floats` floats afterwards (reallocated when it held fewer; a failed
// allocation leaves it empty, capacity 0).
void reserve(float*& buffer, size_t& capacity, size_t floats, const char* what) {
  if (floats <= capacity) return;
  cudaFree(buffer);
  buffer = nullptr;
  capacity = 0;
  const cudaError_t e = cudaMalloc(&buffer, floats * sizeof(float));
  if (e != cudaSuccess) {
    buffer = nullptr;
    throw RuntimeError(std::string("CUDA cache rows buffer (") + what + "): " + cudaGetErrorString(e));
  }
  capacity = floats;
}

}  // namespace

CacheRowsBuffer::~CacheRowsBuffer() {
  cudaFree(keys_);
  cudaFree(values_);
}

CacheRowsSignal CacheRowsBuffer::fill(const DeviceKvLayerView& view, bool keys, bool values) {
  if (!keys && !values) return {};
  CacheRowsArgs a = plan_cache_rows(view, nullptr, nullptr);
  const size_t n = cache_rows_floats(a);
  if (keys) reserve(keys_, keys_capacity_, n, "keys");
  if (values) reserve(values_, values_capacity_, n, "values");
  a.keys_out = keys ? keys_ : nullptr;
  a.values_out = values ? values_ : nullptr;
  if (n > 0) {  // an empty grid is not a valid launch
    const unsigned blocks = unsigned((n + kCacheRowsThreads - 1) / kCacheRowsThreads);
    cache_rows_kernel<<<blocks, kCacheRowsThreads>>>(a, n);
    const cudaError_t e = launch_status();
    if (e != cudaSuccess) throw RuntimeError(std::string("CUDA cache_rows_kernel: ") + cudaGetErrorString(e));
  }
  return describe_cache_rows(a, /*on_device=*/true);
}

}  // namespace kvevict::cuda
