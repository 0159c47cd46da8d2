#include "dsl/token_pairs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "core/util/error.h"
#include "dsl/elementwise.h"

namespace kvevict::dsl::interp {
namespace {

// Elements of a tensor of `shape` before axis s (the outer part) and after it (t).
int64_t size_of_axes(const Layout& L, unsigned shape, unsigned mask) { return L.size(shape & mask); }
constexpr unsigned kBeforeS = kAxisS - 1, kAfterS = ~(kAxisS | kBeforeS);

// Copies the rows rows[0 .. n) of axis s of `src` (laid out under L) into dst (laid out with s of
// extent n, in that order).
void gather_rows(const Layout& L, unsigned shape, const float* src, const int64_t* rows, int64_t n, float* dst) {
  const int64_t outer = size_of_axes(L, shape, kBeforeS), inner = size_of_axes(L, shape, kAfterS), S = L.ext[kS];
  if (inner == 1) {  // s innermost (u[d, s]): one float per row, no call per element
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i) dst[o * n + i] = src[o * S + rows[i]];
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < n; ++i) std::copy_n(src + (o * S + rows[i]) * inner, inner, dst + (o * n + i) * inner);
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
  // A Rename may be a view of its operand's array: the operand lives as long as the view
  // (descending, so a chain of renames passes the last use down to the array's owner).
  for (int i = n - 1; i >= 0; --i) {
    const Node& nd = p.nodes[static_cast<size_t>(i)];
    if (nd.op == NodeOp::Rename) last[static_cast<size_t>(nd.a)] = std::max(last[static_cast<size_t>(nd.a)], last[static_cast<size_t>(i)]);
  }
  return last;
}

namespace {

// The token-pair nodes an exit depends on (through token-pair operands) and its leaves: the
// non-pair nodes they read, computed before the exit.
struct PairRegion {
  std::set<int> nodes, leaves;
};

PairRegion pair_region(const LoweredProgram& p, int exit) {
  PairRegion r;
  std::vector<int> stack = {p.nodes[static_cast<size_t>(exit)].a};
  while (!stack.empty()) {
    const int j = stack.back();
    stack.pop_back();
    if (!r.nodes.insert(j).second) continue;
    for (int o : {p.nodes[static_cast<size_t>(j)].a, p.nodes[static_cast<size_t>(j)].b, p.nodes[static_cast<size_t>(j)].c}) {
      if (o < 0) continue;
      if (is_token_pair(p.nodes[static_cast<size_t>(o)].shape)) stack.push_back(o);
      else r.leaves.insert(o);
    }
  }
  return r;
}

// Whether every node of the region is element-wise along t (its value at (s, t) depends only on its
// operands at (s, t)): then a tile may cover any subset of the columns. Token windows and
// normalise read other columns; anything else in a pair region is element-wise.
bool columnwise(const LoweredProgram& p, const PairRegion& r) {
  for (int j : r.nodes) {
    const Node& n = p.nodes[static_cast<size_t>(j)];
    switch (n.op) {
      case NodeOp::Unary: case NodeOp::Binary: case NodeOp::Select: break;
      case NodeOp::Reduce: if (n.axes & (kAxisS | kAxisT)) return false; break;
      case NodeOp::Rename: if (rename_target(n, kS) != kS || rename_target(n, kT) != kT) return false; break;
      default: return false;
    }
  }
  return true;
}

bool is_axis_index(const Node& n, unsigned axis) { return n.op == NodeOp::AxisIndex && n.axes == axis; }

// The columns a tile covers: a block [t0, t0 + m) of t, or (points) one column per row of s,
// points[i] for the tile's row i. Points evaluate a columnwise region with t of extent 1: each
// leaf with t is gathered at the rows' columns into an array over s (t is innermost and s comes
// just before it, so dropping t and adding s keeps every other stride).
struct TileColumns {
  int64_t t0 = 0, m = 0;
  const int64_t* points = nullptr;
};

// Nodes of a tile that are not computed: the ones a scan reads in place (skip), and one node that
// is the same array as another (view = view_of: a diagonal select in a tile off the diagonal).
struct TileShortcuts {
  std::vector<int> skip;
  int view = -1, view_of = -1;
  bool skipped(int j) const { return std::find(skip.begin(), skip.end(), j) != skip.end(); }
};

// Loads the tile's leaves (the rows rows[0 .. n) of s, the columns `cols`) into tb and computes
// the region's nodes under Lt (the layout with s of extent n, t of extent cols.m or 1).
void compute_tile(const LoweredProgram& p, const Layout& L, const Layout& Lt, const PairRegion& r,
                  const std::vector<bool>& fused, const std::vector<Buf>& bufs, std::vector<Buf>& tb, const int64_t* rows,
                  const TileColumns& cols, const ComputeNode& compute, const TileShortcuts& sc = {}) {
  BufferPool& pool = buffer_pool();
  const int64_t n = Lt.ext[kS], T = L.ext[kT];
  for (int j : r.leaves) {
    const Buf& src = bufs[static_cast<size_t>(j)];
    Buf& dst = tb[static_cast<size_t>(j)];
    dst.shape = src.shape;
    dst.data = src.data;
    if (src.shape & kAxisS) {
      dst.own = pool.take(static_cast<size_t>(Lt.size(src.shape)));
      gather_rows(L, src.shape, src.data, rows, n, dst.own.data());
      dst.data = dst.own.data();
    } else if ((src.shape & kAxisT) && (cols.points || cols.m < T)) {
      const int64_t outer = L.size(src.shape & ~kAxisT), width = cols.points ? n : cols.m;
      dst.own = pool.take(static_cast<size_t>(outer * width));
      float* o = dst.own.data();
      for (int64_t k = 0; k < outer; ++k)
        for (int64_t i = 0; i < width; ++i) o[k * width + i] = src.data[k * T + (cols.points ? cols.points[i] : cols.t0 + i)];
      if (cols.points) dst.shape = (src.shape & ~kAxisT) | kAxisS;
      dst.data = o;
    }
  }
  for (int j : r.nodes) {  // ascending: operands first
    if (fused[static_cast<size_t>(j)] || sc.skipped(j)) continue;
    if (j == sc.view) {
      tb[static_cast<size_t>(j)].shape = p.nodes[static_cast<size_t>(j)].shape;
      tb[static_cast<size_t>(j)].data = tb[static_cast<size_t>(sc.view_of)].data;
      continue;
    }
    compute(j, p.nodes[static_cast<size_t>(j)], Lt, tb);
  }
}

void release_tile(std::vector<Buf>& tb) {
  for (Buf& buf : tb) {
    buffer_pool().give(buf.own);
    buf.data = nullptr;
  }
}

Layout tile_layout(const Layout& L, int64_t n, int64_t m) {
  Layout Lt = L;
  Lt.ext[kS] = static_cast<int>(n);
  Lt.ext[kT] = static_cast<int>(m);
  return Lt;
}

// Floats per (s, t) element of the region's materialised nodes and the exit: the tile budget.
int64_t per_element(const LoweredProgram& p, const Layout& L, const PairRegion& r, const std::vector<bool>& fused, const Node& x) {
  int64_t e = L.size(x.shape & ~(kAxisS | kAxisT));
  for (int j : r.nodes)
    if (!fused[static_cast<size_t>(j)]) e = std::max(e, L.size(p.nodes[static_cast<size_t>(j)].shape & ~(kAxisS | kAxisT)));
  return std::max<int64_t>(e, 1);
}

// IndexScan: max(t: if(P, t, c)) scans the columns from the last block down; a row of s leaves
// the scan once each of its elements holds a value no unseen column can beat (the unseen columns
// give t0 - 1 at most, or c), so each row costs the columns up to its own last hit (R-KV: the
// newest partner above the threshold is usually among the last few dozen tokens; a row without
// one reads every column). min(t: if(P, t, c)) scans up from the first block (unseen: t1 at least,
// or c). max and min of numbers that are indices or one constant do not depend on the order.
constexpr int64_t kScanBlock = 32;
// Rows of s per scan tile: more than the tiles' kPairTileRows, so that the blocks of the first
// columns (where every row is still active) run as few, larger contractions (bench_rkv: 256 rows
// 18.1 ms against 19.6 ms for 64 and 21.0 ms for 1024 per SmolLM2-shaped head).
constexpr int64_t kScanTileRows = 256;

// What an index scan reads in place (planned once per exit). The select `if(P, t, c)` is never
// materialised; when P is a comparison `X op k` (or `k op X`) with a scalar k that no other node of
// the region reads, neither is P: the scan compares X's values itself. A select `if(s == t, A, Y)`
// (the self-pair mask), whose condition nothing else reads, is Y itself in a block of columns that
// holds none of the tile's rows: it is then a view of Y (the same values, so the same bits).
struct ScanPlan {
  int tested = -1;     // the node whose values are tested: P, or the compared X
  int scalar = -1;     // the comparison's scalar operand; -1: the test is P != 0
  BinaryFn fn = BinaryFn::Ne;
  bool scalar_left = false;
  int diagonal = -1, diagonal_cond = -1, diagonal_else = -1;
};

bool is_comparison(BinaryFn f) {
  return f == BinaryFn::Gt || f == BinaryFn::Ge || f == BinaryFn::Lt || f == BinaryFn::Le || f == BinaryFn::Eq || f == BinaryFn::Ne;
}

// How many nodes of the region read node i (an operand read twice by one node counts twice).
int readers_in_region(const LoweredProgram& p, const PairRegion& r, int i) {
  int n = 0;
  for (int j : r.nodes)
    for (int o : {p.nodes[static_cast<size_t>(j)].a, p.nodes[static_cast<size_t>(j)].b, p.nodes[static_cast<size_t>(j)].c}) n += o == i;
  return n;
}

ScanPlan plan_scan(const LoweredProgram& p, const PairRegion& r, const Node& sel) {
  ScanPlan plan;
  plan.tested = sel.a;
  const Node& cond = p.nodes[static_cast<size_t>(sel.a)];
  if (r.nodes.count(sel.a) && cond.op == NodeOp::Binary && is_comparison(cond.binary) && readers_in_region(p, r, sel.a) == 1)
    for (bool left : {false, true}) {
      const int k = left ? cond.a : cond.b, x = left ? cond.b : cond.a;
      if (p.nodes[static_cast<size_t>(k)].shape == 0) {
        plan = {x, k, cond.binary, left, -1, -1, -1};
        break;
      }
    }
  for (int j : r.nodes) {
    const Node& d = p.nodes[static_cast<size_t>(j)];
    if (d.op != NodeOp::Select || d.shape != p.nodes[static_cast<size_t>(d.c)].shape) continue;
    const Node& eq = p.nodes[static_cast<size_t>(d.a)];
    if (eq.op != NodeOp::Binary || eq.binary != BinaryFn::Eq || readers_in_region(p, r, d.a) != 1) continue;
    const Node &l = p.nodes[static_cast<size_t>(eq.a)], &rt = p.nodes[static_cast<size_t>(eq.b)];
    if ((is_axis_index(l, kAxisS) && is_axis_index(rt, kAxisT)) || (is_axis_index(l, kAxisT) && is_axis_index(rt, kAxisS))) {
      plan.diagonal = j, plan.diagonal_cond = d.a, plan.diagonal_else = d.c;
      break;
    }
  }
  return plan;
}

// The exit and its select in one pass over a block of columns [t0, t0 + m): each element of the
// exit (laid out under Lt, s of the active rows) gets the last (first) column where the test
// holds, combined with the constant c when some column of the block fails it. That is the set of
// values `if(P, t, c)` takes in the block, so its max (min) is the tiled one bit for bit: the
// values are exact integers or c, and max/min of a set does not depend on the order.
template <class Test>
void scan_rows(const Layout& Lt, unsigned exit_shape, const Buf& tested, int64_t t0, float c, bool last, float* v, Test test) {
  int64_t cs[kNumAxes], xs[kNumAxes], e[kOuter];
  Lt.strides(tested.shape, cs);
  Lt.strides(exit_shape, xs);
  const int64_t rows = Lt.rows(exit_shape, e), m = Lt.ext[kT], step = cs[kT];
  const float none = last ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  for (int64_t row = 0; row < rows; ++row) {
    int64_t k[kOuter];
    row_coordinates(row, e, k);
    const float* p = tested.data + dot(k, cs);
    int64_t hits = 0, hit = -1;
    if (last) {
      for (int64_t i = m - 1; i >= 0 && hit < 0; --i) hit = test(p[i * step]) ? i : -1;
    } else {
      for (int64_t i = 0; i < m && hit < 0; ++i) hit = test(p[i * step]) ? i : -1;
    }
    for (int64_t i = 0; i < m; ++i) hits += test(p[i * step]);
    float r = hit >= 0 ? static_cast<float>(t0 + hit) : none;
    if (hits < m) r = last ? std::max(r, c) : std::min(r, c);
    v[dot(k, xs)] = r;
  }
}

void scan_block(const Layout& Lt, unsigned exit_shape, const ScanPlan& plan, const std::vector<Buf>& tb, int64_t t0, float c,
                bool last, float* v) {
  const Buf& x = tb[static_cast<size_t>(plan.tested)];
  if (plan.scalar < 0) return scan_rows(Lt, exit_shape, x, t0, c, last, v, [](float y) { return y != 0.0f; });
  const float k = tb[static_cast<size_t>(plan.scalar)].data[0];
  switch (plan.fn) {  // one instantiation per comparison, so that the test is inlined
#define KVEVICT_SCAN_CASE(F)                                                                                                 \
  case BinaryFn::F:                                                                                                          \
    if (plan.scalar_left) return scan_rows(Lt, exit_shape, x, t0, c, last, v, [k](float y) { return apply_binary(BinaryFn::F, k, y) != 0.0f; }); \
    return scan_rows(Lt, exit_shape, x, t0, c, last, v, [k](float y) { return apply_binary(BinaryFn::F, y, k) != 0.0f; });
    KVEVICT_SCAN_CASE(Gt) KVEVICT_SCAN_CASE(Ge) KVEVICT_SCAN_CASE(Lt) KVEVICT_SCAN_CASE(Le) KVEVICT_SCAN_CASE(Eq) KVEVICT_SCAN_CASE(Ne)
#undef KVEVICT_SCAN_CASE
    default: throw RuntimeError("policy program: an index scan planned a test that is not a comparison");
  }
}

void evaluate_index_scan(const LoweredProgram& p, const Layout& L, int exit, const PairRegion& r,
                         const std::vector<bool>& fused, std::vector<Buf>& bufs, const ComputeNode& compute) {
  const Node& x = p.nodes[static_cast<size_t>(exit)];
  const Node& sel = p.nodes[static_cast<size_t>(x.a)];  // if(P, t, c): never materialised (scan_block)
  const float c = p.nodes[static_cast<size_t>(sel.c)].value;
  const ScanPlan plan = plan_scan(p, r, sel);
  const bool last = x.reducer == Reducer::Max;
  const int64_t S = L.ext[kS], T = L.ext[kT], B = std::min(T, kScanBlock);
  const int64_t tile = std::max<int64_t>(1, std::min<int64_t>(kScanTileRows, kPairTileElements / (per_element(p, L, r, fused, x) * B)));
  const int64_t outer = L.size(x.shape & ~kAxisS);  // elements per row of s (s is the exit's innermost axis)
  Buf& out = bufs[static_cast<size_t>(exit)];
  out.shape = x.shape;
  out.own = buffer_pool().take(static_cast<size_t>(L.size(x.shape)));
  out.data = out.own.data();
  float* best = out.own.data();  // best[o * S + s]
  for (int64_t i = 0; i < outer * S; ++i) best[i] = last ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  std::vector<Buf> tb(p.nodes.size());
  std::vector<int64_t> active, still;
  std::vector<float> v(static_cast<size_t>(outer * tile));
  // What each block skips: the select (and the comparison the scan makes itself); off the
  // diagonal also the self-pair condition, its select a view.
  TileShortcuts on_diagonal;
  on_diagonal.skip = {x.a};
  if (plan.scalar >= 0) on_diagonal.skip.push_back(sel.a);
  TileShortcuts off_diagonal = on_diagonal;
  if (plan.diagonal >= 0) {
    off_diagonal.skip.push_back(plan.diagonal_cond);
    off_diagonal.view = plan.diagonal, off_diagonal.view_of = plan.diagonal_else;
  }
  for (int64_t s0 = 0; s0 < S; s0 += tile) {
    active.resize(static_cast<size_t>(std::min(tile, S - s0)));
    for (size_t i = 0; i < active.size(); ++i) active[i] = s0 + static_cast<int64_t>(i);
    for (int64_t k = 0; k * B < T && !active.empty(); ++k) {
      const int64_t t0 = last ? std::max<int64_t>(0, T - (k + 1) * B) : k * B;
      const int64_t t1 = last ? T - k * B : std::min(T, (k + 1) * B);
      const int64_t n = static_cast<int64_t>(active.size());
      const Layout Lt = tile_layout(L, n, t1 - t0);
      // Off the diagonal when no active row (ascending) lies in [t0, t1).
      const auto first_row = std::lower_bound(active.begin(), active.end(), t0);
      const bool off = first_row == active.end() || *first_row >= t1;
      compute_tile(p, L, Lt, r, fused, bufs, tb, active.data(), {t0, t1 - t0, nullptr}, compute, off ? off_diagonal : on_diagonal);
      scan_block(Lt, x.shape, plan, tb, t0, c, last, v.data());  // v[o * n + j] for the active row j
      const float bound = last ? std::max(static_cast<float>(t0 - 1), c) : std::min(static_cast<float>(t1), c);
      still.clear();
      for (int64_t j = 0; j < n; ++j) {
        bool done = true;
        for (int64_t o = 0; o < outer; ++o) {
          float& b = best[o * S + active[static_cast<size_t>(j)]];
          b = last ? std::max(b, v[o * n + j]) : std::min(b, v[o * n + j]);
          done = done && (last ? b >= bound : b <= bound);
        }
        if (!done) still.push_back(active[static_cast<size_t>(j)]);
      }
      active.swap(still);
      release_tile(tb);
    }
  }
}

// PointSum: sum(s: if(t == X[s], Y, 0)) (or mean) adds, for each s, Y at the one column t = X[s]
// (when X[s] is an index 0 .. T - 1; a row with no such column adds nothing), in increasing s:
// the additions of the tiled evaluation without its zeros (+0 added to a sum that starts at +0
// changes no bit), so the result is the same bit for bit.
void evaluate_point_sum(const LoweredProgram& p, const Layout& L, int exit, const PairRegion& r, int index_node,
                        const std::vector<bool>& fused, std::vector<Buf>& bufs, const ComputeNode& compute) {
  const Node& x = p.nodes[static_cast<size_t>(exit)];
  const int64_t S = L.ext[kS], T = L.ext[kT];
  const float* X = bufs[static_cast<size_t>(index_node)].data;
  std::vector<int64_t> column(static_cast<size_t>(S));
  std::vector<bool> hit(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const float v = X[s];
    hit[static_cast<size_t>(s)] = v >= 0.0f && v < static_cast<float>(T) && v == std::floor(v);
    column[static_cast<size_t>(s)] = hit[static_cast<size_t>(s)] ? static_cast<int64_t>(v) : 0;
  }
  Buf& out = bufs[static_cast<size_t>(exit)];
  out.shape = x.shape;
  out.own = buffer_pool().take(static_cast<size_t>(T));
  out.data = out.own.data();
  std::fill(out.own.begin(), out.own.end(), 0.0f);
  const int64_t tile = std::max<int64_t>(1, kPairTileElements / per_element(p, L, r, fused, x));
  std::vector<Buf> tb(p.nodes.size());
  std::vector<int64_t> rows(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) rows[static_cast<size_t>(s)] = s;
  for (int64_t s0 = 0; s0 < S; s0 += tile) {
    const int64_t n = std::min(tile, S - s0);
    const Layout Lt = tile_layout(L, n, 1);
    compute_tile(p, L, Lt, r, fused, bufs, tb, rows.data() + s0, {0, 1, column.data() + s0}, compute);
    const float* y = tb[static_cast<size_t>(x.a)].data;
    for (int64_t i = 0; i < n; ++i)
      if (hit[static_cast<size_t>(s0 + i)]) out.own[static_cast<size_t>(column[static_cast<size_t>(s0 + i)])] += y[i];
    release_tile(tb);
  }
  if (x.reducer == Reducer::Mean)
    for (float& o : out.own) o *= S > 0 ? 1.0f / static_cast<float>(S) : 0.0f;
}

// The index operand X of a PointSum exit (-1 if the exit is not one).
int point_sum_index(const LoweredProgram& p, const Node& x) {
  if (x.op != NodeOp::Reduce || (x.reducer != Reducer::Sum && x.reducer != Reducer::Mean) || x.axes != kAxisS || x.shape != kAxisT)
    return -1;
  const Node& sel = p.nodes[static_cast<size_t>(x.a)];
  if (sel.op != NodeOp::Select) return -1;
  const Node& zero = p.nodes[static_cast<size_t>(sel.c)];
  const Node& cond = p.nodes[static_cast<size_t>(sel.a)];
  if (zero.op != NodeOp::Const || zero.value != 0.0f || cond.op != NodeOp::Binary || cond.binary != BinaryFn::Eq) return -1;
  for (auto [i, j] : {std::pair{cond.a, cond.b}, std::pair{cond.b, cond.a}})
    if (is_axis_index(p.nodes[static_cast<size_t>(i)], kAxisT) && p.nodes[static_cast<size_t>(j)].shape == kAxisS) return j;
  return -1;
}

bool is_index_scan(const LoweredProgram& p, const Node& x) {
  if (x.op != NodeOp::Reduce || (x.reducer != Reducer::Max && x.reducer != Reducer::Min) || x.axes != kAxisT || !(x.shape & kAxisS))
    return false;
  const Node& sel = p.nodes[static_cast<size_t>(x.a)];
  if (sel.op != NodeOp::Select) return false;
  const Node& other = p.nodes[static_cast<size_t>(sel.c)];
  return is_axis_index(p.nodes[static_cast<size_t>(sel.b)], kAxisT) && other.op == NodeOp::Const && !std::isnan(other.value) &&
         !(other.value == 0.0f && std::signbit(other.value));
}

void evaluate_tiles(const LoweredProgram& p, const Layout& L, int exit, const PairRegion& r, const std::vector<bool>& fused,
                    std::vector<Buf>& bufs, const ComputeNode& compute) {
  const Node& x = p.nodes[static_cast<size_t>(exit)];
  // Rows of s per tile: as many as fit kPairTileElements in the largest materialised node.
  int64_t row = 1;
  for (int j : r.nodes)
    if (!fused[static_cast<size_t>(j)]) row = std::max(row, L.size(p.nodes[static_cast<size_t>(j)].shape & ~unsigned(kAxisS)));
  row = std::max(row, L.size(x.shape & ~unsigned(kAxisS)));
  const int64_t S = L.ext[kS], T = L.ext[kT];
  const int64_t tile = std::max<int64_t>(1, std::min<int64_t>(kPairTileRows, kPairTileElements / row));
  if (row > kPairRowLimit)  // the checker's shape bound keeps a row near max(G, head_dim) x T
    throw RuntimeError("policy program: a token-pair value at line " + std::to_string(x.line) + ", column " + std::to_string(x.col) +
                       " needs " + std::to_string(row) + " numbers per row of s, more than the limit of " + std::to_string(kPairRowLimit));
  const bool keeps_s = x.shape & kAxisS;
  const int64_t out_size = L.size(x.shape);
  Buf& out = bufs[static_cast<size_t>(exit)];
  out.shape = x.shape;
  out.own = buffer_pool().take(static_cast<size_t>(out_size));
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
  std::vector<int64_t> rows(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) rows[static_cast<size_t>(s)] = s;
  for (int64_t s0 = 0; s0 < S; s0 += tile) {
    const int64_t n = std::min(tile, S - s0);
    const Layout Lt = tile_layout(L, n, T);
    compute_tile(p, L, Lt, r, fused, bufs, tb, rows.data() + s0, {0, T, nullptr}, compute);
    if (keeps_s) {
      compute(exit, x, Lt, tb);
      scatter_rows(L, x.shape, tb[static_cast<size_t>(exit)].data, s0, n, out.own.data());
    } else {
      const Node& m = p.nodes[static_cast<size_t>(x.a)];
      const Buf& a = product ? tb[static_cast<size_t>(m.a)] : tb[static_cast<size_t>(x.a)];
      const Buf* b = product ? &tb[static_cast<size_t>(m.b)] : nullptr;
      accumulate_over_s(Lt, x, a, b, n, acc.data(), out.own.data());
    }
    release_tile(tb);
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

}  // namespace

PairExitKind pair_exit_kind(const LoweredProgram& p, int exit) {
  const Node& x = p.nodes[static_cast<size_t>(exit)];
  if (!is_pair_exit(p, exit) || !columnwise(p, pair_region(p, exit))) return PairExitKind::Tiles;
  if (is_index_scan(p, x)) return PairExitKind::IndexScan;
  if (point_sum_index(p, x) >= 0) return PairExitKind::PointSum;
  return PairExitKind::Tiles;
}

void evaluate_pair_exit(const LoweredProgram& p, const Layout& L, int exit, const std::vector<bool>& fused,
                        std::vector<Buf>& bufs, const ComputeNode& compute) {
  const PairRegion r = pair_region(p, exit);
  const bool shortcut = L.ext[kS] > 0 && L.ext[kT] > 0;  // an empty reduction takes the tiled path's rule
  switch (shortcut ? pair_exit_kind(p, exit) : PairExitKind::Tiles) {
    case PairExitKind::IndexScan: return evaluate_index_scan(p, L, exit, r, fused, bufs, compute);
    case PairExitKind::PointSum:
      return evaluate_point_sum(p, L, exit, r, point_sum_index(p, p.nodes[static_cast<size_t>(exit)]), fused, bufs, compute);
    case PairExitKind::Tiles: return evaluate_tiles(p, L, exit, r, fused, bufs, compute);
  }
}

}  // namespace kvevict::dsl::interp
