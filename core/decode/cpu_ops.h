#pragma once
// Dense kernels of the CPU decoder on row-major data. The OpenMP team splits the output features of
// every matrix product; each thread runs BLAS single-threaded on its rows (f32 weights), the
// quantised matvec kernels of quant_dot.h (one token, weights in their file format), or dequantises
// its rows, up to kTileFloats values at a time, into a per-thread f32 scratch and calls sgemm on each
// tile (a block of tokens, weights in their file format). The elementwise work is parallelised with
// OpenMP over rows.
#include <cstddef>
#include <initializer_list>

#include "core/model/weights.h"

namespace kvevict::cpu {

// Values of a quantised matrix dequantised per sgemm call in a block product (4 MiB per thread). Large
// enough that a thread's whole slice of SmolLM2's matrices is one tile: sgemm packs the input block
// once per call, so small tiles cost more in repacking than the dequantisation itself.
constexpr int kTileFloats = 1 << 20;

// y[n][w.rows] = x[n][w.cols] · W^T with W stored [out][in] (y = W x per row); in == w.cols.
void matmul(const float* x, int n, const TypedMatrix& w, float* y);
// Several products of the same input, y_k[n][out_k] = x · W_k^T, computed in one parallel region
// whose threads split the concatenated output features (the fused q/k/v and gate/up projections).
struct Projection {
  TypedMatrix w;
  float* y;
};
void matmul_fused(const float* x, int n, std::initializer_list<Projection> projections);
// y[r] = x[r] * weight / sqrt(mean(x[r]^2) + eps) for each of n rows of length dim.
void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y);
// gate[i] = silu(gate[i]) * up[i] for i < count.
void swiglu(float* gate, const float* up, size_t count);
// y[i] += x[i].
void add_inplace(float* y, const float* x, size_t count);
// Adds bias[out] to every one of n rows.
void add_bias_rows(float* y, const float* bias, int n, int out);
float dot(const float* a, const float* b, int n);

// Sets the OpenMP thread count (0 keeps the default) and makes BLAS single-threaded: the kernels
// here split work over OpenMP threads themselves.
void set_threads(int threads);

}  // namespace kvevict::cpu
