#pragma once
// Dense kernels of the CPU decoder on row-major float32 data. Matrix products go to BLAS
// (OpenBLAS, multithreaded); the elementwise work is parallelised with OpenMP over rows.
#include <cstddef>

namespace kvevict::cpu {

// y[n][out] = x[n][in] · W^T with W stored [out][in] (y = W x per row); sgemv when n == 1.
void matmul(const float* x, int n, int in, const float* w, int out, float* y);
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
