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

// GraphKernel::PerWord. Word i of the graph ([n][words], row-major): word i % words of row i / words.
__global__ void __launch_bounds__(kGraphThreads) codebook_graph_kernel(const float* unit, int n, int dim, double theta,
                                                                       int64_t words, uint64_t* graph) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kGraphThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * words) return;
  graph[i] = codebook_graph_word(unit, n, dim, theta, static_cast<int>(i / words), i % words);
}

// GraphKernel::Tiled. Block (x, y) makes word x of rows 64 y .. 64 y + 63: 64 rows a against the
// 64 vectors b of the word. Both sets of 64 go through shared memory kTileK elements at a time
// (loaded row by row, so a warp's loads are consecutive floats); thread (ty, tx) of 16 x 16 keeps
// the 16 pairs a = ty + 16 i, b = tx + 16 j and adds the elements in order with fmaf, so each
// pair's cosine is codebook_dot's chain, bit for bit (codebook_graph.h; fmaf(x, y, z) ==
// fmaf(y, x, z)). The pairs' bits meet in the block's 64 words by atomicOr.
constexpr int kTileRows = 64;
constexpr int kTileK = 32;
constexpr int kTileSide = 16;  // kTileSide^2 == kGraphThreads; each thread: (kTileRows / kTileSide)^2 pairs
constexpr int kPairsPerSide = kTileRows / kTileSide;
static_assert(kTileSide * kTileSide == kGraphThreads, "one thread per 16 x 16 cell of the block");
static_assert(kTileRows == 64, "one graph word is 64 vectors");
static_assert((kTileRows * kTileK) % kGraphThreads == 0, "a tile loads in whole rounds");

__global__ void __launch_bounds__(kGraphThreads) codebook_graph_tiled_kernel(const float* unit, int n, int dim,
                                                                             double theta, int64_t words,
                                                                             uint64_t* graph) {
  // [k][row], one column of padding so that the row-by-row stores fall in distinct banks.
  __shared__ float rows_a[kTileK][kTileRows + 1];
  __shared__ float rows_b[kTileK][kTileRows + 1];
  __shared__ unsigned long long bits[kTileRows];
  const int tx = threadIdx.x % kTileSide, ty = threadIdx.x / kTileSide;
  const int64_t a0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t b0 = static_cast<int64_t>(blockIdx.x) * kTileRows;
  if (threadIdx.x < kTileRows) bits[threadIdx.x] = 0;
  __syncthreads();  // zeroed before any atomicOr, even when dim == 0 runs no element loop

  float dot[kPairsPerSide][kPairsPerSide];
  for (int i = 0; i < kPairsPerSide; ++i)
    for (int j = 0; j < kPairsPerSide; ++j) dot[i][j] = 0.0f;

  for (int k0 = 0; k0 < dim; k0 += kTileK) {
    const int chunk = dim - k0 < kTileK ? dim - k0 : kTileK;
    for (int e = threadIdx.x; e < kTileRows * kTileK; e += kGraphThreads) {
      const int r = e / kTileK, k = e % kTileK;
      const bool in_k = k < chunk;
      rows_a[k][r] = in_k && a0 + r < n ? unit[(a0 + r) * dim + k0 + k] : 0.0f;
      rows_b[k][r] = in_k && b0 + r < n ? unit[(b0 + r) * dim + k0 + k] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < chunk; ++k)  // only the real elements: the chain is codebook_dot's
      for (int i = 0; i < kPairsPerSide; ++i) {
        const float x = rows_a[k][ty + kTileSide * i];
        for (int j = 0; j < kPairsPerSide; ++j) dot[i][j] = fmaf(rows_b[k][tx + kTileSide * j], x, dot[i][j]);
      }
    __syncthreads();
  }

  for (int i = 0; i < kPairsPerSide; ++i) {
    const int64_t a = a0 + ty + kTileSide * i;
    unsigned long long word = 0;
    for (int j = 0; j < kPairsPerSide; ++j) {
      const int64_t b = b0 + tx + kTileSide * j;
      if (b < n && (b == a || dot[i][j] > theta)) word |= 1ull << (tx + kTileSide * j);
    }
    if (word != 0) atomicOr(&bits[ty + kTileSide * i], word);
  }
  __syncthreads();
  if (threadIdx.x < kTileRows && a0 + threadIdx.x < n) graph[(a0 + threadIdx.x) * words + blockIdx.x] = bits[threadIdx.x];
}

class CudaSimilarityGraph final : public SimilarityGraphBuilder {
 public:
  explicit CudaSimilarityGraph(GraphKernel kernel) : kernel_(kernel) {}

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
    DeviceArray<float> device_unit(static_cast<size_t>(n) * dim);
    device_unit.upload(unit, static_cast<size_t>(n) * dim);
    DeviceArray<uint64_t> graph(static_cast<size_t>(total));
    if (kernel_ == GraphKernel::Tiled) {
      // words <= 2^25 and row tiles <= 2^25 for n < 2^31: x is within a grid's 2^31 - 1, y can pass 65535
      const int64_t row_tiles = (static_cast<int64_t>(n) + kTileRows - 1) / kTileRows;
      if (row_tiles > 65535)
        throw RuntimeError("device similarity graph: " + std::to_string(n) + " vectors need more row tiles than a grid holds");
      const dim3 grid(static_cast<unsigned>(words), static_cast<unsigned>(row_tiles));
      codebook_graph_tiled_kernel<<<grid, kGraphThreads>>>(device_unit.data(), n, dim, theta, words, graph.data());
      check(launch_status(), "codebook_graph_tiled_kernel");
    } else {
      const int64_t blocks = (total + kGraphThreads - 1) / kGraphThreads;
      if (blocks > INT32_MAX)
        throw RuntimeError("device similarity graph: " + std::to_string(n) + " vectors need more blocks than a launch holds");
      codebook_graph_kernel<<<static_cast<unsigned>(blocks), kGraphThreads>>>(device_unit.data(), n, dim, theta, words,
                                                                               graph.data());
      check(launch_status(), "codebook_graph_kernel");
    }
    std::vector<uint64_t> out(static_cast<size_t>(total));
    graph.download(out.data(), out.size());  // synchronises with the kernel
    return out;
  }

 private:
  GraphKernel kernel_;
};

}  // namespace

std::unique_ptr<SimilarityGraphBuilder> make_cuda_similarity_graph(GraphKernel kernel) {
  return std::make_unique<CudaSimilarityGraph>(kernel);
}

}  // namespace kvevict::cuda
