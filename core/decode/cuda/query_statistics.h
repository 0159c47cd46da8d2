#pragma once
// CUDA runner of the prompt query statistics of one layer's block (core/decode/query_statistics_block.h):
// the CUDA decoder's answer to ObservationRequest::query_statistics, computed from the block's
// post-RoPE queries where they already are (device memory), so only n_heads x head_dim^2 doubles
// cross to the host instead of every query row.
//
// The algorithm is query_statistics_twin's, step for step: rows before query_statistics_first_row
// skipped; the rest in chunks of `chunk_rows` rows; per chunk, each head vector rotated back with
// rope_rotate_pair_back from the f32 table (the twin's bits), the chunk's per-head mean summed in
// double in row order and divided by the chunk's count (the twin's bits), the centred sum of outer
// products by cuBLAS (cublasDgemmStridedBatched, one batch per head: its own summation order), and
// the chunk merged into the running statistics on the device with merge_query_statistics's
// expressions. So the means equal the twin's bit for bit and m2 equals it to double rounding.
//
// Compiled only with CUDA (KVEVICT_HAVE_CUDA: .cu files and files guarded by it). Kernels and the
// GEMM run on the legacy default stream, ordered after the decoder's kernels that wrote the
// queries; with covariance, compute sets `blas`'s stream to it and its pointer mode to host (the
// only cuBLAS call); then it synchronises by downloading the result. A failed launch, allocation, copy or cuBLAS call throws RuntimeError
// (DeviceOutOfMemory for an allocation) naming it; bad shapes throw UsageError.
//
// Status: compiled with nvcc, never run on a GPU during development (the GPU test
// tests/core/query_statistics_gpu_test.cpp compares it with the twin and the host where one exists).
#include <cublas_v2.h>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/query_statistics_block.h"

namespace kvevict::cuda {

// Rows per chunk: the chunk's rows in double take chunk_rows x n_heads x head_dim x 8 bytes
// (64 MiB at 32 x 128 heads), and each chunk costs one merge of n_heads x head_dim^2.
inline constexpr int kQueryStatisticsChunkRows = 2048;

// Device scratch reused layer after layer (the chunk's rows in double, the chunk's means and m2,
// the running means and m2): grown as needed, never shrunk, freed on destruction.
class QueryStatisticsBuffer {
 public:
  // The statistics of a block's post-RoPE queries in device memory: queries [n][n_heads * head_dim]
  // f32, row i at position first_position + i. cos/sin: the block's RoPE table in device memory,
  // row i's pair k at [i * (head_dim / 2) + k] (block-relative: row 0 is the block's first row,
  // counted or not; the CUDA decoder's cos_/sin_ for its call). Equal to query_statistics_twin with
  // the same chunk_rows: means bit for bit, m2 to double rounding. A block with no counted row
  // returns empty_query_statistics without touching the device. UsageError when chunk_rows,
  // n_heads or head_dim is not positive or head_dim is odd.
  BlockQueryStatistics compute(const float* queries, int n, int first_position, const QueryStatisticsRequest& request,
                               int n_heads, int head_dim, RopeStyle style, const float* cos, const float* sin,
                               cublasHandle_t blas, int chunk_rows = kQueryStatisticsChunkRows);

 private:
  DeviceArray<double> rows_;        // [chunk][n_heads][head_dim]: rotated back, then centred in place
  DeviceArray<double> chunk_mean_;  // [n_heads][head_dim]
  DeviceArray<double> chunk_m2_;    // [n_heads][head_dim][head_dim] (cuBLAS's column-major C per head)
  DeviceArray<double> mean_;        // running, [n_heads][head_dim]
  DeviceArray<double> m2_;          // running, [n_heads][head_dim][head_dim]
};

}  // namespace kvevict::cuda
