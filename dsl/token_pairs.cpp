#include "dsl/token_pairs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/util/error.h"

namespace kvevict::dsl::interp {
namespace {

// Elements of a tensor of `shape` before axis s (the outer part) and after it (t).
int64_t size_of_axes(const Layout& L, unsigned shape, unsigned mask) { return L.size(shape & mask); }
constexpr unsigned kBeforeS = kAxisS - 1, kAfterS = ~(kAxisS | kBeforeS);

// Copies rows s0 .. s0 + n of axis s of `src` (laid out under L) into dst (laid out with s of extent n).
void slice_rows(const Layout& L, unsigned shape, const float* src, int64_t s0, int64_t n, float* dst) {
  const int64_t outer = size_of_axes(L, shape, kBeforeS), inner = size_of_axes(L, shape, kAfterS), S = L.ext[kS];
  for (int64_t o = 0; o < outer; ++o) std::copy(src + (o * S + s0) * inner, src + (o * S + s0 + n) * inner, dst + o * n * inner);
}

// The inverse: writes a tile's rows back into the full tensor.
void scatter_rows(const Layout& L, unsigned shape, const float* tile, int64_t s0, int64_t n, float* dst) {
  const int64_t outer = size_of_axes(L, shape, kBeforeS), inner = size_of_axes(L, shape, kAfterS), S = L.ext[kS];
  for (int64_t o = 0; o < outer; ++o) std::copy(tile + o * n * inner, tile + (o + 1) * n * inner, dst + (o * S + s0) * inner);
}

// One tile's contribution to an exit over s: for s in the tile, for the other reduced
// coordinates in canonical order: acc (double, t reduced) or out (float) += the operand (a, or
// a * b for a fused product, each product rounded to float); max/min keep the extreme.
void accumulate_over_s(const Layout& Lt, const Node& x, const Buf& a, const Buf* b, int64_t n, double* acc, float* out) {
  int64_t as[kNumAxes], bs[kNumAxes] = {}, os[kNumAxes], e[kOuter];
  Lt.strides(a.shape, as);
  if (b) Lt.strides(b->shape, bs);
  Lt.strides(x.shape, os);
  // The reduced coordinates other than s and t, in canonical order, as offsets into a and b.
  std::vector<std::pair<int64_t, int64_t>> red = {{0, 0}};
  for (int i = 0; i < kOuter; ++i) {
    if (i == kS || !(x.axes & (1u << i))) continue;
    std::vector<std::pair<int64_t, int64_t>> next;
    for (auto [oa, ob] : red)
      for (int j = 0; j < Lt.ext[i]; ++j) next.push_back({oa + j * as[i], ob + j * bs[i]});
    red.swap(next);
  }
  const int64_t rows = Lt.rows(x.shape, e);
  const bool with_t = x.axes & kAxisT;
  const int64_t T = Lt.ext[kT];
  const int64_t n_out = with_t ? 1 : Lt.tokens(x.shape);
  const int64_t at = (a.shape & kAxisT) ? 1 : 0, bt = (b && (b->shape & kAxisT)) ? 1 : 0;
  const int64_t steps = with_t ? T : n_out;
  const Reducer r = x.reducer;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n * steps * static_cast<int64_t>(red.size()) >= (1 << 18))
  for (int64_t row = 0; row < rows; ++row) {
    int64_t c[kOuter];
    row_coordinates(row, e, c);
    const int64_t o = dot(c, os);
    double* ad = acc + o;
    float* of = out + o;
    for (int64_t sl = 0; sl < n; ++sl)
      for (const auto& [ra, rb] : red) {
        const float* pa = a.data + dot(c, as) + sl * as[kS] + ra;
        const float* pb = b ? b->data + dot(c, bs) + sl * bs[kS] + rb : nullptr;
        for (int64_t i = 0; i < steps; ++i) {
          float v = pa[i * at];
          if (pb) v = v * pb[i * bt];
          if (with_t) {
            double& m = ad[0];
            if (r == Reducer::Max) m = v > m ? v : m;
            else if (r == Reducer::Min) m = v < m ? v : m;
            else if (r == Reducer::Entropy) m -= pa[i * at] > 0.0f ? static_cast<double>(pa[i * at]) * std::log(static_cast<double>(pa[i * at])) : 0.0;
            else m += v;
          } else {
            float& m = of[i];
            if (r == Reducer::Max) m = v > m ? v : m;
            else if (r == Reducer::Min) m = v < m ? v : m;
            else if (r == Reducer::Entropy) m -= pa[i * at] > 0.0f ? pa[i * at] * std::log(pa[i * at]) : 0.0f;
            else m += v;
          }
        }
      }
  }
}

}  // namespace

bool is_pair_exit(const LoweredProgram& p, int i) {
  const Node& n = p.nodes[static_cast<size_t>(i)];
  return n.op == NodeOp::Reduce && !is_token_pair(n.shape) && is_token_pair(p.nodes[static_cast<size_t>(n.a)].shape);
}

std::vector<int> physical_last_use(const LoweredProgram& p, const std::vector<bool>& fused) {
  const int n = static_cast<int>(p.nodes.size());
  // where[i]: the last node at which node i is evaluated (itself, unless it is evaluated inside
  // its users' evaluation). Users come after their operands, so one backward pass suffices.
  std::vector<int> where(static_cast<size_t>(n), -1);
  for (int i = n - 1; i >= 0; --i) {
    const Node& nd = p.nodes[static_cast<size_t>(i)];
    if (!is_token_pair(nd.shape) && !fused[static_cast<size_t>(i)]) where[static_cast<size_t>(i)] = i;
    (void)nd;
  }
  for (int i = n - 1; i >= 0; --i)
    for (int o : {p.nodes[static_cast<size_t>(i)].a, p.nodes[static_cast<size_t>(i)].b, p.nodes[static_cast<size_t>(i)].c})
      if (o >= 0 && where[static_cast<size_t>(o)] != o) where[static_cast<size_t>(o)] = std::max(where[static_cast<size_t>(o)], where[static_cast<size_t>(i)]);
  std::vector<int> last(static_cast<size_t>(n), -1);
  for (int i = 0; i < n; ++i)
    for (int o : {p.nodes[static_cast<size_t>(i)].a, p.nodes[static_cast<size_t>(i)].b, p.nodes[static_cast<size_t>(i)].c})
      if (o >= 0) last[static_cast<size_t>(o)] = std::max(last[static_cast<size_t>(o)], where[static_cast<size_t>(i)]);
  return last;
}

void evaluate_pair_exit(const LoweredProgram& p, const Layout& L, int exit, const std::vector<bool>& fused,
                        std::vector<Buf>& bufs, const ComputeNode& compute) {
  const Node& x = p.nodes[static_cast<size_t>(exit)];
  // The token-pair nodes the exit depends on (through token-pair operands), and the leaves.
  std::set<int> region, leaves;
  std::vector<int> stack = {x.a};
  while (!stack.empty()) {
    const int j = stack.back();
    stack.pop_back();
    if (!region.insert(j).second) continue;
    for (int o : {p.nodes[static_cast<size_t>(j)].a, p.nodes[static_cast<size_t>(j)].b, p.nodes[static_cast<size_t>(j)].c}) {
      if (o < 0) continue;
      if (is_token_pair(p.nodes[static_cast<size_t>(o)].shape)) stack.push_back(o);
      else leaves.insert(o);
    }
  }
  // Rows of s per tile: as many as fit kPairTileElements in the largest materialised node.
  int64_t row = 1;
  for (int j : region)
    if (!fused[static_cast<size_t>(j)]) row = std::max(row, L.size(p.nodes[static_cast<size_t>(j)].shape & ~unsigned(kAxisS)));
  row = std::max(row, L.size(x.shape & ~unsigned(kAxisS)));
  const int64_t S = L.ext[kS];
  const int64_t tile = std::max<int64_t>(1, std::min<int64_t>(kPairTileRows, kPairTileElements / row));
  if (row > kPairRowLimit)  // the checker's shape bound keeps a row near max(G, head_dim) x T
    throw RuntimeError("policy program: a token-pair value at line " + std::to_string(x.line) + ", column " + std::to_string(x.col) +
                       " needs " + std::to_string(row) + " numbers per row of s, more than the limit of " + std::to_string(kPairRowLimit));
  const bool keeps_s = x.shape & kAxisS;
  const int64_t out_size = L.size(x.shape);
  BufferPool& pool = buffer_pool();
  Buf& out = bufs[static_cast<size_t>(exit)];
  out.shape = x.shape;
  out.own = pool.take(static_cast<size_t>(out_size));
  out.data = out.own.data();
  // An exit over s accumulates tile after tile, s outermost (then the other reduced axes in
  // canonical order, t inner): float unless t is reduced too (then double), so the result does
  // not depend on the tile size. One that keeps s writes each tile's rows.
  const bool with_t = x.axes & kAxisT;
  const bool extreme = x.reducer == Reducer::Max || x.reducer == Reducer::Min;
  const double init = x.reducer == Reducer::Max ? -std::numeric_limits<double>::infinity()
                      : x.reducer == Reducer::Min ? std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(keeps_s ? 0 : static_cast<size_t>(out_size), init);
  if (!keeps_s && !with_t) std::fill(out.own.begin(), out.own.end(), static_cast<float>(init));
  const bool product = fused[static_cast<size_t>(x.a)];
  std::vector<Buf> tb(p.nodes.size());
  for (int64_t s0 = 0; s0 < S; s0 += tile) {
    const int64_t n = std::min(tile, S - s0);
    Layout Lt = L;
    Lt.ext[kS] = static_cast<int>(n);
    for (int j : leaves) {
      const Buf& src = bufs[static_cast<size_t>(j)];
      Buf& dst = tb[static_cast<size_t>(j)];
      dst.shape = src.shape;
      if (src.shape & kAxisS) {
        dst.own = pool.take(static_cast<size_t>(Lt.size(src.shape)));
        slice_rows(L, src.shape, src.data, s0, n, dst.own.data());
        dst.data = dst.own.data();
      } else {
        dst.data = src.data;
      }
    }
    for (int j : region)  // ascending: operands first
      if (!fused[static_cast<size_t>(j)]) compute(j, p.nodes[static_cast<size_t>(j)], Lt, tb);
    if (keeps_s) {
      compute(exit, x, Lt, tb);
      scatter_rows(L, x.shape, tb[static_cast<size_t>(exit)].data, s0, n, out.own.data());
    } else {
      const Node& m = p.nodes[static_cast<size_t>(x.a)];
      const Buf& a = product ? tb[static_cast<size_t>(m.a)] : tb[static_cast<size_t>(x.a)];
      const Buf* b = product ? &tb[static_cast<size_t>(m.b)] : nullptr;
      accumulate_over_s(Lt, x, a, b, n, acc.data(), out.own.data());
    }
    for (Buf& buf : tb) {
      pool.give(buf.own);
      buf.data = nullptr;
    }
  }
  if (keeps_s) return;
  double count = 1;
  for (int i = 0; i < kNumAxes; ++i)
    if (x.axes & (1u << i)) count *= L.ext[i];
  for (int64_t i = 0; i < out_size; ++i) {
    float& o = out.own[static_cast<size_t>(i)];
    if (with_t) {
      double v = acc[static_cast<size_t>(i)];
      if (x.reducer == Reducer::Mean) v = count > 0 ? v / count : 0.0;
      o = static_cast<float>(v);
    } else if (x.reducer == Reducer::Mean) {
      o *= count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    }
    if (extreme && S == 0) o = 0.0f;  // an empty reduction is 0
  }
}

}  // namespace kvevict::dsl::interp
