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

// One work item of the t-kept contraction: o[0 .. len) = sum over k of x[k] * y[k] (axpy_block
// in increasing k). Compiled for AVX-512, AVX2 and the baseline (GCC function multiversioning,
// chosen once at load time for the machine): the wider clones vectorise the same lanewise IEEE
// multiplies and adds (fp-contract=off: no fused multiply-adds whatever the build's flags, since GCC
// contracts C++ by default even in ISO mode; no reordering), so every clone gives the same bits. R-KV's cosine tiles spend most of their time here.
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off"))) void contract_block(
    float* o, const float* xb, bool xv, const float* yb, bool yv, const int64_t* xr, const int64_t* yr, int64_t count,
    int64_t len, float inv) {
  for (int64_t i = 0; i < len; ++i) o[i] = 0.0f;
  for (int64_t k = 0; k < count; ++k) axpy_block(o, xb + xr[k], xv, yb + yr[k], yv, len);
  if (inv != 1.0f)
    for (int64_t i = 0; i < len; ++i) o[i] *= inv;
}

// Four output rows whose second operand is the same block y (a row of s in R-KV's cosine tile:
// x[d, s] is one number per row, y[d, t] is shared): each y vector is loaded once for the four
// rows and the 4 x 16 sums stay in registers. Per element the same sum as contract_block (+0,
// then the products in increasing k), so the same bits.
__attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off"))) void contract_rows4(
    float* const o[4], const float* const xb[4], bool xv, const float* yb, const int64_t* xr, const int64_t* yr,
    int64_t count, int64_t len, float inv) {
  constexpr int kW = 16;
  int64_t i0 = 0;
  if (!xv)
    for (; i0 + kW <= len; i0 += kW) {
      float a0[kW] = {}, a1[kW] = {}, a2[kW] = {}, a3[kW] = {};
      for (int64_t k = 0; k < count; ++k) {
        const float* y = yb + yr[k] + i0;
        const float x0 = xb[0][xr[k]], x1 = xb[1][xr[k]], x2 = xb[2][xr[k]], x3 = xb[3][xr[k]];
        for (int i = 0; i < kW; ++i) {
          a0[i] += x0 * y[i];
          a1[i] += x1 * y[i];
          a2[i] += x2 * y[i];
          a3[i] += x3 * y[i];
        }
      }
      for (int i = 0; i < kW; ++i) {
        o[0][i0 + i] = a0[i];
        o[1][i0 + i] = a1[i];
        o[2][i0 + i] = a2[i];
        o[3][i0 + i] = a3[i];
      }
    }
  for (int r = 0; r < 4; ++r) {
    if (i0 < len) {
      float* p = o[r] + i0;
      for (int64_t i = 0; i < len - i0; ++i) p[i] = 0.0f;
      for (int64_t k = 0; k < count; ++k) axpy_block(p, xb[r] + xr[k] + (xv ? i0 : 0), xv, yb + yr[k] + i0, true, len - i0);
    }
    if (inv != 1.0f)
      for (int64_t i = 0; i < len; ++i) o[r][i] *= inv;
  }
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
    // Work item w = (token block, group of 4 rows), groups inner: consecutive items share an
    // operand block. A group whose rows share y (y along t, x not) runs contract_rows4; others,
    // and the last rows, row by row. Each output element is computed by one item.
    const int64_t groups = (rows + 3) / 4, work = groups * blocks;
    const float scale = reducer == Reducer::Mean ? inv : 1.0f;
#pragma omp parallel for schedule(static) if (work > 1 && rows * n * count_outer >= (1 << 18))
    for (int64_t w = 0; w < work; ++w) {
      const int64_t b = w / groups, r0 = (w % groups) * 4, nr = std::min<int64_t>(4, rows - r0);
      const int64_t t0 = b * block, len = std::min(block, n - t0);
      float* o[4];
      const float* xb[4];
      const float* yb[4];
      for (int64_t r = 0; r < nr; ++r) {
        int64_t c[kOuter];
        row_coordinates(r0 + r, e, c);
        o[r] = out + dot(c, os) + t0;
        xb[r] = x.data + dot(c, xs) + (xv ? t0 : 0);
        yb[r] = y.data + dot(c, ys) + (yv ? t0 : 0);
      }
      if (nr == 4 && yv && !xv && yb[1] == yb[0] && yb[2] == yb[0] && yb[3] == yb[0]) {
        contract_rows4(o, xb, xv, yb[0], xr.data(), yr.data(), count_outer, len, scale);
        continue;
      }
      for (int64_t r = 0; r < nr; ++r)
        contract_block(o[r], xb[r], xv, yb[r], yv, xr.data(), yr.data(), count_outer, len, scale);
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
