#include "core/decode/cpu_ops.h"

#include "core/decode/quant_dot.h"
#include "core/decode/simd_math.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvevict::cpu {

namespace {

// Below this many multiply-adds a product runs on the calling thread: waking a team costs more.
constexpr double kParallelMacs = 1 << 18;

bool is_f32(const TypedMatrix& w) { return w.type == 0; }

// The one-token input quantised for the quantised kernels, shared read-only by the team.
struct MatvecInput {
  const float* x;
  const quant::Q8Vector* xq;
  quant::Isa isa;
};

// Rows [o0, o1) of y[n][ldy] = x · W^T.
void matmul_slice(const float* x, int n, const TypedMatrix& w, int o0, int o1, float* y, int ldy, const MatvecInput& in) {
  if (o1 <= o0) return;
  const int cols = w.cols;
  if (is_f32(w)) {
    const float* ws = reinterpret_cast<const float*>(w.row(o0));
    if (n == 1) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, o1 - o0, cols, 1.0f, ws, cols, x, 1, 0.0f, y + o0, 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, o1 - o0, cols, 1.0f, x, cols, ws, cols, 0.0f, y + o0, ldy);
    }
    return;
  }
  if (n == 1) {
    quant::matvec_rows(w, in.x, *in.xq, o0, o1, y, in.isa);
    return;
  }
  const int tile_rows = std::min(o1 - o0, std::max(16, kTileFloats / cols));
  thread_local std::vector<float> tile;
  tile.resize(static_cast<size_t>(tile_rows) * cols);
  for (int t0 = o0; t0 < o1; t0 += tile_rows) {
    const int t1 = std::min(o1, t0 + tile_rows);
    quant::dequantize_rows(w, t0, t1, tile.data());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, t1 - t0, cols, 1.0f, x, cols, tile.data(), cols, 0.0f,
                y + t0, ldy);
  }
}

// Quantises x once when a one-token product reads a quantised matrix.
MatvecInput prepare_input(const float* x, int n, int cols, bool any_quantised) {
  thread_local quant::Q8Vector xq;
  MatvecInput in{x, &xq, quant::best_isa()};
  if (n == 1 && any_quantised && cols % quant::kQ8Block == 0) quant::quantize_q8(x, cols, xq);
  return in;
}

}  // namespace

// BLAS itself runs single-threaded (see set_threads); the OpenMP team splits the output features,
// so each thread streams its own rows of W once. One thread pool, not two competing ones.
void matmul(const float* x, int n, const TypedMatrix& w, float* y) { matmul_fused(x, n, {{w, y}}); }

void matmul_fused(const float* x, int n, std::initializer_list<Projection> projections) {
  int total = 0;
  bool quantised = false;
  const int cols = projections.begin()->w.cols;
  for (const Projection& p : projections) {
    total += p.w.rows;
    quantised = quantised || !is_f32(p.w);
  }
  const MatvecInput in = prepare_input(x, n, cols, quantised);
  const double macs = static_cast<double>(n) * cols * total;
  const int threads = macs < kParallelMacs ? 1 : std::min(omp_get_max_threads(), std::max(1, total / 16));
  if (threads == 1) {
    for (const Projection& p : projections) matmul_slice(x, n, p.w, 0, p.w.rows, p.y, p.w.rows, in);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Slices aligned to 16 outputs keep each thread's part of y on whole cache lines.
    const int per = ((total + nt - 1) / nt + 15) / 16 * 16;
    const int r0 = std::min(total, t * per), r1 = std::min(total, r0 + per);
    // This thread's rows of the stacked [W_1; W_2; ...], intersected with each matrix.
    int base = 0;
    for (const Projection& p : projections) {
      const int lo = std::max(r0, base) - base, hi = std::min(r1, base + p.w.rows) - base;
      if (lo < hi) matmul_slice(x, n, p.w, lo, hi, p.y, p.w.rows, in);
      base += p.w.rows;
    }
  }
}

void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y) {
#pragma omp parallel for if (static_cast<double>(n) * dim > kParallelMacs) schedule(static)
  for (int r = 0; r < n; ++r) {
    const float* xr = x + static_cast<size_t>(r) * dim;
    float* yr = y + static_cast<size_t>(r) * dim;
    const double ss = simd::dot(xr, xr, dim);
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / dim + eps));
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void swiglu(float* gate, const float* up, size_t count) {
  constexpr size_t kChunk = 1 << 14;
  const long chunks = static_cast<long>((count + kChunk - 1) / kChunk);
#pragma omp parallel for if (count > 65536) schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const size_t begin = c * kChunk, end = std::min(count, begin + kChunk);
    simd::silu_mul(gate + begin, up + begin, static_cast<long>(end - begin));
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

float dot(const float* a, const float* b, int n) { return simd::dot(a, b, n); }

void set_threads(int threads) {
  openblas_set_num_threads(1);
  if (threads > 0) omp_set_num_threads(threads);
}


}  // namespace kvevict::cpu
