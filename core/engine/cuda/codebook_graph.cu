// SpindleKV's similarity graph on a CUDA device; see codebook_graph.h.
#include "core/engine/cuda/codebook_graph.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/launch_status.h"
#include "core/engine/codebook_graph.h"

namespace kvevict::cuda {
namespace {

constexpr int kGraphThreads = 256;

// Word i of the graph ([n][words], row-major): word i % words of row i / words.
__global__ void __launch_bounds__(kGraphThreads) codebook_graph_kernel(const float* unit, int n, int dim, double theta,
                                                                       int64_t words, uint64_t* graph) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kGraphThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * words) return;
  graph[i] = codebook_graph_word(unit, n, dim, theta, static_cast<int>(i / words), i % words);
}

class CudaSimilarityGraph final : public SimilarityGraphBuilder {
 public:
  // The device's buffers live for one graph only (512 MiB of bits at 64K vectors would otherwise sit
  // beside the weights and the cache for the engine's life); a graph that would take more than half
  // of the device's free memory is built on the host instead (the same bits, codebook_graph.h).
  std::vector<uint64_t> build(const float* unit, int n, int dim, double theta) const override {
    const int64_t words = static_cast<int64_t>(codebook_graph_words(n));
    const int64_t total = static_cast<int64_t>(n) * words;
    if (total == 0) return std::vector<uint64_t>();
    const size_t bytes = static_cast<size_t>(total) * sizeof(uint64_t) + static_cast<size_t>(n) * dim * sizeof(float);
    size_t free_bytes = 0, device_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &device_bytes), "cudaMemGetInfo");
    if (bytes > free_bytes / 2) return host_similarity_graph(unit, n, dim, theta);
    const int64_t blocks = (total + kGraphThreads - 1) / kGraphThreads;
    if (blocks > INT32_MAX)
      throw RuntimeError("device similarity graph: " + std::to_string(n) + " vectors need more blocks than a launch holds");
    DeviceArray<float> device_unit(static_cast<size_t>(n) * dim);
    device_unit.upload(unit, static_cast<size_t>(n) * dim);
    DeviceArray<uint64_t> graph(static_cast<size_t>(total));
    codebook_graph_kernel<<<static_cast<unsigned>(blocks), kGraphThreads>>>(device_unit.data(), n, dim, theta, words,
                                                                             graph.data());
    check(launch_status(), "codebook_graph_kernel");
    std::vector<uint64_t> out(static_cast<size_t>(total));
    graph.download(out.data(), out.size());  // synchronises with the kernel
    return out;
  }
};

}  // namespace

std::unique_ptr<SimilarityGraphBuilder> make_cuda_similarity_graph() { return std::make_unique<CudaSimilarityGraph>(); }

}  // namespace kvevict::cuda
