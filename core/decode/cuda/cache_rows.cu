// The cached rows kernel; contracts in cache_rows.h and core/decode/cache_rows_signal.h (whose
// element body cache_rows_twin runs on the CPU).
#include <cuda_runtime.h>

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
      norms_(std::make_unique<DeviceArray<float>>()) {}

CacheRowsBuffer::~CacheRowsBuffer() = default;

CacheRowsSignal CacheRowsBuffer::fill(const DeviceKvLayerView& view, CacheRowsWanted wanted, const RopeTableView& rope) {
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
  return describe_cache_rows(a, /*on_device=*/true);
}

}  // namespace kvevict::cuda
