// The query statistics kernels; contract in query_statistics.h. The algorithm is
// query_statistics_twin's (core/decode/query_statistics_block.cpp): keep the two step for step,
// or the means stop matching the twin's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/query_statistics.h"
#include "core/decode/rope.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kThreads = 256;
// The kernels loop over their elements with a grid stride, so a grid of at most this many blocks
// covers any chunk (no launch depends on a grid dimension's limit).
constexpr size_t kMaxBlocks = 65535;

// One chunk's pointers and sizes, by value (parameter space).
struct ChunkArgs {
  const float* queries = nullptr;  // the block's rows [n][n_heads][head_dim]
  const float* cos = nullptr;      // the block's table, [block row][head_dim / 2]
  const float* sin = nullptr;
  double* rows = nullptr;           // the chunk's rows [m][n_heads][head_dim]
  double* chunk_mean = nullptr;     // [n_heads][head_dim]
  const double* chunk_m2 = nullptr;  // [n_heads][head_dim][head_dim]
  double* mean = nullptr;           // running
  double* m2 = nullptr;             // running
  int n_heads = 0, head_dim = 0;
  RopeStyle style = RopeStyle::AdjacentPairs;
  int64_t r0 = 0;  // the chunk's first row in the block (the table's row too)
  int m = 0;       // the chunk's rows
  double na = 0, nb = 0;  // rows merged so far, rows of the chunk (merge_query_statistics's na, nb)
};

// Element x of [m][n_heads][head_dim / 2]: one pair of one head of one chunk row, rotated back in
// f32 with the twin's call (rope_rotate_pair_back's explicit fmaf: the same bits), stored in double.
__device__ __forceinline__ void unrope_element(const ChunkArgs& a, size_t x) {
  const int half = a.head_dim / 2;
  const size_t row = size_t(a.n_heads) * a.head_dim, pairs = size_t(a.n_heads) * half;
  const size_t i = x / pairs;
  const int h = int((x % pairs) / half), k = int(x % half);
  int e0, e1;
  rope_pair_elements(a.style, k, half, &e0, &e1);
  const size_t r = size_t(a.r0) + i;
  const float* q = a.queries + r * row + size_t(h) * a.head_dim;
  float x0 = q[e0], x1 = q[e1];
  const size_t t = r * half + k;
  rope_rotate_pair_back(&x0, &x1, a.cos[t], a.sin[t]);
  double* out = a.rows + i * row + size_t(h) * a.head_dim;
  out[e0] = x0;
  out[e1] = x1;
}

// Element x of [n_heads][head_dim]: the chunk's mean of one channel, summed from 0 in row order and
// divided by the row count, as the twin does (no multiply feeds an add: contraction changes nothing).
__device__ __forceinline__ void chunk_mean_element(const ChunkArgs& a, size_t x) {
  const size_t row = size_t(a.n_heads) * a.head_dim;
  double s = 0.0;
  for (int i = 0; i < a.m; ++i) s += a.rows[size_t(i) * row + x];
  a.chunk_mean[x] = s / a.m;
}

// Element x of [m][n_heads][head_dim]: the row centred on its chunk's mean, in place.
__device__ __forceinline__ void centre_element(const ChunkArgs& a, size_t x) {
  const size_t row = size_t(a.n_heads) * a.head_dim;
  a.rows[x] = a.rows[x] - a.chunk_mean[x % row];
}

// Element x of [n_heads][head_dim][head_dim]: merge_query_statistics's m2 update, with the running
// means before this chunk (merge_mean_element runs after every thread of this kernel). The
// product chain ends in a division before any add, so contraction cannot fuse it either. chunk_m2
// is cuBLAS's column-major C read row-major, i.e. C transposed: X^T X is symmetric, so the same
// sums (to cuBLAS's rounding).
__device__ __forceinline__ void merge_m2_element(const ChunkArgs& a, size_t x) {
  const int d = a.head_dim;
  const size_t dd = size_t(d) * d;
  const size_t h = x / dd;
  const int ra = int((x % dd) / d), cb = int(x % d);
  const double* mean = a.mean + h * d;
  const double* mean_b = a.chunk_mean + h * d;
  const double n_ab = a.na + a.nb;
  const double delta_a = mean_b[ra] - mean[ra];
  a.m2[x] += a.chunk_m2[x] + delta_a * (mean_b[cb] - mean[cb]) * a.na * a.nb / n_ab;
}

// Element x of [n_heads][head_dim]: merge_query_statistics's mean update.
__device__ __forceinline__ void merge_mean_element(const ChunkArgs& a, size_t x) {
  const double n_ab = a.na + a.nb;
  a.mean[x] += (a.chunk_mean[x] - a.mean[x]) * a.nb / n_ab;
}

// One kernel per element body, each looping over its elements with a grid stride.
#define KVEVICT_QS_KERNEL(name, body)                                                          \
  __global__ void name(const ChunkArgs a, size_t count) {                                      \
    for (size_t x = blockIdx.x * size_t(blockDim.x) + threadIdx.x; x < count;                  \
         x += size_t(gridDim.x) * blockDim.x)                                                  \
      body(a, x);                                                                              \
  }
KVEVICT_QS_KERNEL(unrope_kernel, unrope_element)
KVEVICT_QS_KERNEL(chunk_mean_kernel, chunk_mean_element)
KVEVICT_QS_KERNEL(centre_kernel, centre_element)
KVEVICT_QS_KERNEL(merge_m2_kernel, merge_m2_element)
KVEVICT_QS_KERNEL(merge_mean_kernel, merge_mean_element)
#undef KVEVICT_QS_KERNEL

// Launches `kernel` over `count` elements on the legacy default stream (none for an empty grid,
// which is not a valid launch).
void launch(void (*kernel)(ChunkArgs, size_t), const ChunkArgs& a, size_t count, const char* name) {
  if (count == 0) return;
  const size_t blocks = std::min((count + kThreads - 1) / kThreads, kMaxBlocks);
  kernel<<<unsigned(blocks), kThreads>>>(a, count);
  const cudaError_t e = launch_status();
  if (e != cudaSuccess)
    throw RuntimeError(std::string("CUDA query statistics: ") + name + ": " + cudaGetErrorString(e));
}

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string("CUDA query statistics: ") + what + ": " + cublasGetStatusString(status));
}

}  // namespace

BlockQueryStatistics QueryStatisticsBuffer::compute(const float* queries, int n, int first_position,
                                                    const QueryStatisticsRequest& request, int n_heads, int head_dim,
                                                    RopeStyle style, const float* cos, const float* sin,
                                                    cublasHandle_t blas, int chunk_rows) {
  if (chunk_rows <= 0 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0)
    throw UsageError("CUDA query statistics: " + std::to_string(n_heads) + " heads of " + std::to_string(head_dim) +
                     " in chunks of " + std::to_string(chunk_rows) +
                     " rows (each must be positive, head_dim even)");
  BlockQueryStatistics out = empty_query_statistics(request, n_heads, head_dim);
  const int skip = query_statistics_first_row(n, first_position, request.from);
  if (n - skip <= 0) return out;
  const int d = head_dim;
  const size_t row = size_t(n_heads) * d, all_m2 = row * d;
  rows_.resize(size_t(std::min(chunk_rows, n - skip)) * row);
  chunk_mean_.resize(row);
  mean_.resize(row);
  // The running statistics start as the twin's empty statistic: +0.0 everywhere.
  check(cudaMemset(mean_.data(), 0, row * sizeof(double)), "cudaMemset (means)");
  if (request.covariance) {
    chunk_m2_.resize(all_m2);
    m2_.resize(all_m2);
    check(cudaMemset(m2_.data(), 0, all_m2 * sizeof(double)), "cudaMemset (m2)");
    // The GEMM goes to the kernels' stream, with alpha and beta read from the host.
    check_blas(cublasSetStream(blas, 0), "cublasSetStream");
    check_blas(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_HOST), "cublasSetPointerMode");
  }
  ChunkArgs a;
  a.queries = queries;
  a.cos = cos;
  a.sin = sin;
  a.rows = rows_.data();
  a.chunk_mean = chunk_mean_.data();
  a.chunk_m2 = request.covariance ? chunk_m2_.data() : nullptr;
  a.mean = mean_.data();
  a.m2 = request.covariance ? m2_.data() : nullptr;
  a.n_heads = n_heads;
  a.head_dim = d;
  a.style = style;
  int64_t count = 0;
  for (int64_t r0 = skip; r0 < n; r0 += chunk_rows) {
    const int m = int(std::min<int64_t>(chunk_rows, n - r0));
    a.r0 = r0;
    a.m = m;
    a.na = static_cast<double>(count);
    a.nb = static_cast<double>(m);
    launch(unrope_kernel, a, size_t(m) * n_heads * (d / 2), "unrope_kernel");
    launch(chunk_mean_kernel, a, row, "chunk_mean_kernel");
    if (request.covariance) {
      launch(centre_kernel, a, size_t(m) * row, "centre_kernel");
      // Per head h, X_h (m x d, row stride n_heads * d, at h * d) seen column-major is A = X_h^T
      // (d x m, lda = n_heads * d, heads head_dim apart); C = A A^T is the centred sum X_h^T X_h.
      const double one = 1.0, zero = 0.0;
      check_blas(cublasDgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, d, d, m, &one, a.rows, int(row), d,
                                           a.rows, int(row), d, &zero, chunk_m2_.data(), d,
                                           static_cast<long long>(d) * d, n_heads),
                 "cublasDgemmStridedBatched");
      launch(merge_m2_kernel, a, all_m2, "merge_m2_kernel");
    }
    launch(merge_mean_kernel, a, row, "merge_mean_kernel");
    count += m;
  }
  // Synchronous copies on the legacy default stream: after every kernel and the GEMM above.
  mean_.download(out.mean.data(), row);
  if (request.covariance) m2_.download(out.m2.data(), all_m2);
  out.count = count;
  return out;
}

}  // namespace kvevict::cuda
