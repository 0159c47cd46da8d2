#include "core/decode/cpu_ops.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

namespace kvevict::cpu {

namespace {

// Below this many multiply-adds a product runs on the calling thread: waking a team costs more.
constexpr double kParallelMacs = 1 << 18;

void matmul_slice(const float* x, int n, int in, const float* w, int out, int o0, int o1, float* y) {
  if (o1 <= o0) return;
  const float* ws = w + static_cast<size_t>(o0) * in;
  if (n == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, o1 - o0, in, 1.0f, ws, in, x, 1, 0.0f, y + o0, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o1 - o0, in, 1.0f, x, in, ws, in, 0.0f, y + o0, out);
  }
}

}  // namespace

// BLAS itself runs single-threaded (see set_threads); the OpenMP team splits the output features,
// so each thread streams its own rows of W once. One thread pool, not two competing ones.
void matmul(const float* x, int n, int in, const float* w, int out, float* y) {
  const double macs = static_cast<double>(n) * in * out;
  const int threads = macs < kParallelMacs ? 1 : std::min(omp_get_max_threads(), std::max(1, out / 16));
  if (threads == 1) {
    matmul_slice(x, n, in, w, out, 0, out, y);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Slices aligned to 16 outputs keep each thread's part of y on whole cache lines.
    const int per = ((out + nt - 1) / nt + 15) / 16 * 16;
    const int o0 = std::min(out, t * per), o1 = std::min(out, o0 + per);
    matmul_slice(x, n, in, w, out, o0, o1, y);
  }
}

void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y) {
#pragma omp parallel for if (static_cast<double>(n) * dim > kParallelMacs) schedule(static)
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
  openblas_set_num_threads(1);
  if (threads > 0) omp_set_num_threads(threads);
}


}  // namespace kvevict::cpu
