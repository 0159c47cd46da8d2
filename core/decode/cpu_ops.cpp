#include "core/decode/cpu_ops.h"

#include <cblas.h>
#include <omp.h>

#include <cmath>

namespace kvevict::cpu {

void matmul(const float* x, int n, int in, const float* w, int out, float* y) {
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, out, in, 1.0f, w, in, x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  }
}

void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y) {
#pragma omp parallel for if (n > 16) schedule(static)
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* yr = y + static_cast<size_t>(r) * dim;
    double ss = 0.0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void swiglu(float* gate, const float* up, size_t count) {
#pragma omp parallel for if (count > 65536) schedule(static)
  for (size_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, size_t count) {
#pragma omp parallel for simd if (count > 65536) schedule(static)
  for (size_t i = 0; i < count; ++i) y[i] += x[i];
}

void add_bias_rows(float* y, const float* bias, int n, int out) {
  for (int r = 0; r < n; ++r) {
    float* yr = y + static_cast<size_t>(r) * out;
    for (int i = 0; i < out; ++i) yr[i] += bias[i];
  }
}

float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void set_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }
void set_blas_threads(int threads) { openblas_set_num_threads(threads); }

}  // namespace kvevict::cpu
