#include "dsl/contraction.h"

#include <algorithm>

namespace kvevict::dsl::interp {
namespace {

// The reduced coordinates over the outer axes in `axes`, in increasing canonical order, as
// offsets into a tensor with strides st (0 along an axis the tensor lacks: it is broadcast).
std::vector<int64_t> reduced_offsets(const Layout& L, unsigned axes, const int64_t st[kNumAxes]) {
  std::vector<int64_t> red = {0};
  for (int i = 0; i < kOuter; ++i) {
    if (!(axes & (1u << i))) continue;
    std::vector<int64_t> next;
    next.reserve(red.size() * static_cast<size_t>(L.ext[i]));
    for (int64_t base : red)
      for (int j = 0; j < L.ext[i]; ++j) next.push_back(base + j * st[i]);
    red.swap(next);
  }
  return red;
}

// o[i] += x[i] * y[i] with x or y broadcast along the block (stride 0): three loops the compiler
// vectorises.
inline void axpy_block(float* o, const float* x, bool xv, const float* y, bool yv, int64_t n) {
  if (xv && yv) for (int64_t i = 0; i < n; ++i) o[i] += x[i] * y[i];
  else if (xv) { const float b = y[0]; for (int64_t i = 0; i < n; ++i) o[i] += x[i] * b; }
  else if (yv) { const float a = x[0]; for (int64_t i = 0; i < n; ++i) o[i] += a * y[i]; }
  else o[0] += x[0] * y[0];
}

}  // namespace

void contract(const Layout& L, Reducer reducer, unsigned axes, const Buf& x, const Buf& y, unsigned out_shape, float* out) {
  int64_t xs[kNumAxes], ys[kNumAxes], os[kNumAxes], e[kOuter];
  L.strides(x.shape, xs);
  L.strides(y.shape, ys);
  L.strides(out_shape, os);
  const std::vector<int64_t> xr = reduced_offsets(L, axes, xs), yr = reduced_offsets(L, axes, ys);
  const int64_t count_outer = static_cast<int64_t>(xr.size());
  const int64_t rows = L.rows(out_shape, e);
  const bool xv = x.shape & kAxisT, yv = y.shape & kAxisT;
  if (!(axes & kAxisT)) {
    // t kept (or absent): float accumulation in increasing reduced order, per token.
    const int64_t n = L.tokens(out_shape);
    const int64_t block = std::max<int64_t>(1, std::min<int64_t>(n, kContractionBlock));
    const int64_t blocks = n > 0 ? (n + block - 1) / block : 0;
    const float inv = reducer == Reducer::Mean && count_outer > 0 ? 1.0f / static_cast<float>(count_outer) : 1.0f;
    const int64_t work = rows * blocks;
    // Work item w = (token block, row), rows inner: consecutive items share an operand block.
#pragma omp parallel for schedule(static) if (work > 1 && rows * n * count_outer >= (1 << 18))
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / rows, r = w % rows;
      int64_t c[kOuter];
      row_coordinates(r, e, c);
      const int64_t t0 = b * block, len = std::min(block, n - t0);
      float* o = out + dot(c, os) + t0;
      const float* xb = x.data + dot(c, xs) + (xv ? t0 : 0);
      const float* yb = y.data + dot(c, ys) + (yv ? t0 : 0);
      for (int64_t i = 0; i < len; ++i) o[i] = 0.0f;
      for (int64_t k = 0; k < count_outer; ++k) axpy_block(o, xb + xr[k], xv, yb + yr[k], yv, len);
      if (reducer == Reducer::Mean)
        for (int64_t i = 0; i < len; ++i) o[i] *= inv;
    }
    return;
  }
  // t reduced: double accumulation per output element, reduced rows in canonical order, t inner.
  const int64_t T = L.ext[kT];
  const double count = static_cast<double>(count_outer) * static_cast<double>(T);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * T * count_outer >= (1 << 18))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c[kOuter];
    row_coordinates(r, e, c);
    const float* xb = x.data + dot(c, xs);
    const float* yb = y.data + dot(c, ys);
    double s = 0.0;
    for (int64_t k = 0; k < count_outer; ++k) {
      const float* xp = xb + xr[k];
      const float* yp = yb + yr[k];
      if (xv && yv) for (int64_t t = 0; t < T; ++t) s += xp[t] * yp[t];
      else if (xv) for (int64_t t = 0; t < T; ++t) s += xp[t] * yp[0];
      else for (int64_t t = 0; t < T; ++t) s += xp[0] * yp[t];
    }
    if (reducer == Reducer::Mean) s = count > 0 ? s / count : 0.0;
    out[dot(c, os)] = static_cast<float>(s);
  }
}

std::vector<bool> fused_products(const LoweredProgram& p) {
  std::vector<bool> fused(p.nodes.size(), false);
  for (size_t i = 0; i < p.nodes.size(); ++i)
    fused[i] = p.nodes[i].op == NodeOp::Binary && p.nodes[i].binary == BinaryFn::Mul && static_cast<int>(i) != p.output;
  std::vector<bool> used(p.nodes.size(), false);
  for (const Node& n : p.nodes)
    for (int o : {n.a, n.b, n.c}) {
      if (o < 0) continue;
      used[o] = true;
      const bool contracts = n.op == NodeOp::Reduce && o == n.a && (n.reducer == Reducer::Sum || n.reducer == Reducer::Mean);
      if (!contracts) fused[o] = false;
    }
  for (size_t i = 0; i < fused.size(); ++i) fused[i] = fused[i] && used[i];
  return fused;
}

}  // namespace kvevict::dsl::interp
