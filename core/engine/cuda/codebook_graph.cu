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
  std::vector<uint64_t> build(const float* unit, int n, int dim, double theta) const override {
    const int64_t words = static_cast<int64_t>(codebook_graph_words(n));
    const int64_t total = static_cast<int64_t>(n) * words;
    std::vector<uint64_t> out(static_cast<size_t>(total));
    if (total == 0) return out;
    const int64_t blocks = (total + kGraphThreads - 1) / kGraphThreads;
    if (blocks > INT32_MAX)
      throw RuntimeError("device similarity graph: " + std::to_string(n) + " vectors need more blocks than a launch holds");
    unit_.resize(static_cast<size_t>(n) * dim);
    unit_.upload(unit, static_cast<size_t>(n) * dim);
    graph_.resize(static_cast<size_t>(total));
    codebook_graph_kernel<<<static_cast<unsigned>(blocks), kGraphThreads>>>(unit_.data(), n, dim, theta, words,
                                                                             graph_.data());
    check(launch_status(), "codebook_graph_kernel");
    graph_.download(out.data(), out.size());  // synchronises with the kernel
    return out;
  }

 private:
  // Grown to the largest graph and reused (the builder is the selector's, one engine's).
  mutable DeviceArray<float> unit_;
  mutable DeviceArray<uint64_t> graph_;
};

}  // namespace

std::unique_ptr<SimilarityGraphBuilder> make_cuda_similarity_graph() { return std::make_unique<CudaSimilarityGraph>(); }

}  // namespace kvevict::cuda
