// The accumulated attention's rebuild kernel and its store on the device; contracts in
// accumulated_rebuild.h (here and in core/engine/).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/decode/cuda/launch_status.h"
#include "core/engine/cuda/accumulated_rebuild.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kRebuildThreads = 256;

__global__ void accumulated_rebuild_kernel(const AccumulatedRebuildArgs args, size_t count) {
  const size_t x = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (x < count) accumulated_rebuild_element(args, x);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA accumulated attention: ") + what + ": " + cudaGetErrorString(e));
}

// A device allocation of at least `bytes` bytes (contents not kept when it changes): grown by a
// quarter more than asked when it held fewer, so a cache that grows by one entry per step
// (decoding below the budget) reallocates once every few thousand steps, not in every layer of
// every step; and given back when a layer needs under a quarter of it (after the prompt's
// eviction to a few percent), so the layers' buffers, which pass through the one scratch buffer,
// shrink within one pass over the layers.
struct Buffer {
  void* data = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : data(std::exchange(o.data, nullptr)), bytes(std::exchange(o.bytes, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(data, o.data);
    std::swap(bytes, o.bytes);
    return *this;
  }
  ~Buffer() { cudaFree(data); }
  void reserve(size_t need, const char* what) {
    constexpr size_t kKeepBelow = size_t{1} << 20;  // never shrink an allocation of 1 MiB or less
    if (need <= bytes && (bytes <= kKeepBelow || need >= bytes / 4)) return;
    cudaFree(data);  // synchronises: no kernel still reads the old allocation
    data = nullptr;
    bytes = 0;
    const size_t grown = std::max<size_t>(need + need / 4, 256);
    check(cudaMalloc(&data, grown), what);
    bytes = grown;
  }
};

class CudaAccumulatedAttention final : public AccumulatedAttentionStore {
 public:
  SelectionDevice device() const override { return SelectionDevice::Cuda; }

 protected:
  void resize_layers(int n_layers) override {
    layers_.clear();
    layers_.resize(n_layers);
  }
  void rebuild(int layer, const AccumulatedRebuildPlan& plan, int group, const float* sums, int64_t stride,
               bool sums_on_host) override {
    // One upload: the per-head parts, then the maps (8-byte aligned after the parts).
    const size_t head_bytes = plan.heads.size() * sizeof(AccumulatedHeadRebuild);
    const size_t map_bytes = plan.map.size() * sizeof(int32_t);
    staging_.resize(head_bytes + map_bytes);
    if (head_bytes) std::memcpy(staging_.data(), plan.heads.data(), head_bytes);
    if (map_bytes) std::memcpy(staging_.data() + head_bytes, plan.map.data(), map_bytes);
    plan_buffer_.reserve(staging_.size(), "cudaMalloc (plan)");
    if (!staging_.empty())
      check(cudaMemcpy(plan_buffer_.data, staging_.data(), staging_.size(), cudaMemcpyHostToDevice), "plan upload");
    if (sums && sums_on_host) {
      const size_t bytes = plan.heads.size() * static_cast<size_t>(group) * static_cast<size_t>(stride) * sizeof(float);
      sums_buffer_.reserve(bytes, "cudaMalloc (column sums)");
      if (bytes) check(cudaMemcpy(sums_buffer_.data, sums, bytes, cudaMemcpyHostToDevice), "column sums upload");
      sums = static_cast<const float*>(sums_buffer_.data);
    }
    scratch_.reserve(plan.total * sizeof(float), "cudaMalloc (accumulated attention)");
    AccumulatedRebuildArgs a;
    a.old_data = static_cast<const float*>(layers_[layer].data);
    a.new_data = static_cast<float*>(scratch_.data);
    a.heads = static_cast<const AccumulatedHeadRebuild*>(plan_buffer_.data);
    a.n_heads = static_cast<int>(plan.heads.size());
    a.group = group;
    a.map = reinterpret_cast<const int32_t*>(static_cast<const char*>(plan_buffer_.data) + head_bytes);
    a.sums = sums;
    a.sums_stride = stride;
    if (plan.total > 0) {  // an empty grid is not a valid launch
      const unsigned blocks = unsigned((plan.total + kRebuildThreads - 1) / kRebuildThreads);
      accumulated_rebuild_kernel<<<blocks, kRebuildThreads>>>(a, plan.total);
      check(launch_status(), "accumulated_rebuild_kernel");
    }
    std::swap(layers_[layer], scratch_);
  }
  const float* data(int layer) const override { return static_cast<const float*>(layers_[layer].data); }
  void download(int layer, size_t offset, size_t count, float* out) const override {
    check(cudaMemcpy(out, static_cast<const float*>(layers_[layer].data) + offset, count * sizeof(float),
                     cudaMemcpyDeviceToHost),
          "download");
  }

 private:
  std::vector<Buffer> layers_;
  Buffer scratch_, plan_buffer_, sums_buffer_;
  std::vector<char> staging_;
};

}  // namespace

std::unique_ptr<AccumulatedAttentionStore> make_cuda_accumulated_attention() {
  return std::make_unique<CudaAccumulatedAttention>();
}

}  // namespace kvevict::cuda
