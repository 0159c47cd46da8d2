#include "dsl/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#pragma GCC diagnostic ignored "-Wpsabi"  // simd_math.h uses 64-byte vectors in static inline functions only
#include "core/decode/simd_math.h"
#include "core/engine/counter_rng.h"
#include "core/util/error.h"
#include "dsl/elementwise.h"
#include "dsl/interpreter_layout.h"
#include "dsl/matrix_ops.h"
#include "dsl/sort_ops.h"
#include "dsl/contraction.h"
#include "dsl/token_pairs.h"

namespace kvevict::dsl {
namespace {

using namespace interp;

template <class Op>
inline void binary_row(float* o, const float* a, bool av, const float* b, bool bv, int64_t n, Op op) {
  if (av && bv) for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], b[i]);
  else if (av) { const float y = b[0]; for (int64_t i = 0; i < n; ++i) o[i] = op(a[i], y); }
  else if (bv) { const float x = a[0]; for (int64_t i = 0; i < n; ++i) o[i] = op(x, b[i]); }
  else o[0] = op(a[0], b[0]);
}

template <class Op>
void binary_all(const Layout& L, unsigned shape, const Buf& A, const Buf& B, float* out, Op op) {
  const unsigned shapes[2] = {A.shape, B.shape};
  const int64_t n = L.tokens(shape);
  const bool av = A.shape & kAxisT, bv = B.shape & kAxisT;
  for_rows<2>(L, shape, shapes, [&](int64_t o, const int64_t* offs) {
    binary_row(out + o, A.data + offs[0], av, B.data + offs[1], bv, n, op);
  });
}

void binary(const Layout& L, const Node& nd, const Buf& A, const Buf& B, float* out) {
  // One instantiation per function, so that each loop is compiled (and vectorised) for its own
  // operation instead of switching per element: comparisons and selects fill R-KV's pair tiles.
  switch (nd.binary) {
#define KVEVICT_BINARY_CASE(F) \
  case BinaryFn::F: return binary_all(L, nd.shape, A, B, out, [](float x, float y) { return apply_binary(BinaryFn::F, x, y); });
    KVEVICT_BINARY_CASE(Add) KVEVICT_BINARY_CASE(Sub) KVEVICT_BINARY_CASE(Mul) KVEVICT_BINARY_CASE(Div)
    KVEVICT_BINARY_CASE(Pow) KVEVICT_BINARY_CASE(Min) KVEVICT_BINARY_CASE(Max) KVEVICT_BINARY_CASE(Lt)
    KVEVICT_BINARY_CASE(Le) KVEVICT_BINARY_CASE(Gt) KVEVICT_BINARY_CASE(Ge) KVEVICT_BINARY_CASE(Eq)
    KVEVICT_BINARY_CASE(Ne) KVEVICT_BINARY_CASE(And) KVEVICT_BINARY_CASE(Or)
#undef KVEVICT_BINARY_CASE
  }
}

// One row of a select; CS, AS, BS: whether the condition and the branches vary along t (else
// they are broadcast), fixed per instantiation so that the loop vectorises.
template <int CS, int AS, int BS>
void select_row(float* o, const float* c, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = c[i * CS] != 0.0f ? a[i * AS] : b[i * BS];
}

void select(const Layout& L, const Node& nd, const Buf& C, const Buf& A, const Buf& B, float* out) {
  using Row = void (*)(float*, const float*, const float*, const float*, int64_t);
  static constexpr Row rows[8] = {select_row<0, 0, 0>, select_row<0, 0, 1>, select_row<0, 1, 0>, select_row<0, 1, 1>,
                                  select_row<1, 0, 0>, select_row<1, 0, 1>, select_row<1, 1, 0>, select_row<1, 1, 1>};
  const unsigned shapes[3] = {C.shape, A.shape, B.shape};
  const int64_t n = L.tokens(nd.shape);
  const Row row = rows[((C.shape & kAxisT) ? 4 : 0) | ((A.shape & kAxisT) ? 2 : 0) | ((B.shape & kAxisT) ? 1 : 0)];
  for_rows<3>(L, nd.shape, shapes, [&](int64_t o, const int64_t* offs) {
    row(out + o, C.data + offs[0], A.data + offs[1], B.data + offs[2], n);
  });
}

// Reductions over axes other than t: per output row, accumulate the reduced rows in float in
// increasing index order (vectorised over t).
void reduce_outer(const Layout& L, const Node& nd, const Buf& A, const float* known_mean, float* out) {
  const int64_t n = L.tokens(nd.shape);
  int64_t ast[kNumAxes], ost[kNumAxes], e[kOuter];
  L.strides(A.shape, ast);
  L.strides(nd.shape, ost);
  // Enumerate the reduced coordinates as offsets into A, in increasing canonical order.
  std::vector<int64_t> red = {0};
  for (int i = 0; i < kOuter; ++i) {
    if (!(nd.axes & (1u << i))) continue;
    std::vector<int64_t> next;
    for (int64_t base : red)
      for (int j = 0; j < L.ext[i]; ++j) next.push_back(base + j * ast[i]);
    red.swap(next);
  }
  const int64_t count = static_cast<int64_t>(red.size());
  // The kept outer axes index A with A's own strides (A has every axis of the output).
  const int64_t rows = L.rows(nd.shape, e);
  const Reducer r = nd.reducer;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n * count >= (1 << 20))
  for (int64_t row = 0; row < rows; ++row) {
    int64_t c[kOuter];
    row_coordinates(row, e, c);
    const float* base = A.data + dot(c, ast);
    float* o = out + dot(c, ost);
    if (r == Reducer::Max || r == Reducer::Min) {
      for (int64_t i = 0; i < n; ++i) o[i] = base[red[0] + i];
      for (int64_t k = 1; k < count; ++k) {
        const float* x = base + red[k];
        if (r == Reducer::Max) for (int64_t i = 0; i < n; ++i) o[i] = x[i] > o[i] ? x[i] : o[i];
        else for (int64_t i = 0; i < n; ++i) o[i] = x[i] < o[i] ? x[i] : o[i];
      }
      continue;
    }
    if (r == Reducer::Var && known_mean) {
      const float* m = known_mean + dot(c, ost);
      for (int64_t i = 0; i < n; ++i) o[i] = 0.0f;
      for (int64_t k = 0; k < count; ++k) {
        const float* x = base + red[k];
        for (int64_t i = 0; i < n; ++i) { const float d = x[i] - m[i]; o[i] += d * d; }
      }
      const float invn1 = count > 1 ? 1.0f / static_cast<float>(count - 1) : 0.0f;
      for (int64_t i = 0; i < n; ++i) o[i] *= invn1;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) o[i] = 0.0f;
    if (r == Reducer::Entropy) {
      for (int64_t k = 0; k < count; ++k) {
        const float* x = base + red[k];
        for (int64_t i = 0; i < n; ++i) o[i] -= x[i] > 0.0f ? x[i] * std::log(x[i]) : 0.0f;
      }
      continue;
    }
    for (int64_t k = 0; k < count; ++k) {
      const float* x = base + red[k];
      for (int64_t i = 0; i < n; ++i) o[i] += x[i];
    }
    if (r == Reducer::Sum) continue;
    const float inv = 1.0f / static_cast<float>(count);
    for (int64_t i = 0; i < n; ++i) o[i] *= inv;
    if (r == Reducer::Mean) continue;
    // Var: unbiased, second pass over the rows with the mean known.
    std::vector<float> m(o, o + n);
    for (int64_t i = 0; i < n; ++i) o[i] = 0.0f;
    for (int64_t k = 0; k < count; ++k) {
      const float* x = base + red[k];
      for (int64_t i = 0; i < n; ++i) { const float d = x[i] - m[i]; o[i] += d * d; }
    }
    const float invn1 = count > 1 ? 1.0f / static_cast<float>(count - 1) : 0.0f;
    for (int64_t i = 0; i < n; ++i) o[i] *= invn1;
  }
}

// Reductions that include t: double accumulators, operand elements visited in canonical order.
void reduce_with_t(const Layout& L, const Node& nd, const Buf& A, float* out) {
  const int64_t out_size = L.size(nd.shape);
  int64_t ost[kNumAxes], ast[kNumAxes], e[kOuter];
  L.strides(nd.shape, ost);
  L.strides(A.shape, ast);
  std::vector<double> acc(out_size, 0.0), acc2(out_size, 0.0);
  std::vector<int64_t> cnt(out_size, 0);
  const Reducer r = nd.reducer;
  const int64_t rows = L.rows(A.shape, e);
  // t is reduced, so each (g, h, q, d) row of A feeds one accumulator: keep it in a register for
  // the row (the same additions in the same order as element by element, hence the same bits).
  auto visit_rows = [&](auto&& f) {
    for (int64_t row = 0; row < rows; ++row) {
      int64_t c[kOuter];
      row_coordinates(row, e, c);
      f(dot(c, ost), A.data + dot(c, ast));
    }
  };
  const int64_t n = L.tokens(A.shape);
  if (r == Reducer::Max || r == Reducer::Min) {
    const double init = r == Reducer::Max ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    for (auto& a : acc) a = init;
    visit_rows([&](int64_t o, const float* x) {
      double m = acc[o];
      if (r == Reducer::Max) for (int64_t t = 0; t < n; ++t) m = x[t] > m ? x[t] : m;
      else for (int64_t t = 0; t < n; ++t) m = x[t] < m ? x[t] : m;
      acc[o] = m;
    });
    if (L.size(A.shape) == 0) for (auto& a : acc) a = 0.0;  // empty reduction (T = 0): 0
  } else if (r == Reducer::Entropy) {
    visit_rows([&](int64_t o, const float* x) {
      double s = acc[o];
      for (int64_t t = 0; t < n; ++t) s -= x[t] > 0.0f ? static_cast<double>(x[t]) * std::log(static_cast<double>(x[t])) : 0.0;
      acc[o] = s;
    });
  } else {
    visit_rows([&](int64_t o, const float* x) {
      double s = acc[o];
      for (int64_t t = 0; t < n; ++t) s += x[t];
      acc[o] = s;
      cnt[o] += n;
    });
    if (r != Reducer::Sum)
      for (int64_t i = 0; i < out_size; ++i) acc[i] = cnt[i] ? acc[i] / static_cast<double>(cnt[i]) : 0.0;
    if (r == Reducer::Var) {
      visit_rows([&](int64_t o, const float* x) {
        const double m = acc[o];
        double s = acc2[o];
        for (int64_t t = 0; t < n; ++t) s += (x[t] - m) * (x[t] - m);
        acc2[o] = s;
      });
      for (int64_t i = 0; i < out_size; ++i) acc[i] = cnt[i] > 1 ? acc2[i] / static_cast<double>(cnt[i] - 1) : 0.0;
    }
  }
  for (int64_t i = 0; i < out_size; ++i) out[i] = static_cast<float>(acc[i]);
}

void window(const Layout& L, const Node& nd, const Buf& A, float* out) {
  const unsigned shapes[1] = {A.shape};
  const int64_t T = L.ext[kT];
  const int lo = nd.lo, hi = nd.hi;
  const Reducer r = nd.reducer;
  for_rows<1>(L, nd.shape, shapes, [&](int64_t o_off, const int64_t* offs) {
    float* o = out + o_off;
    const float* x = A.data + offs[0];
    const bool extreme = r == Reducer::Max || r == Reducer::Min;
    const float init = r == Reducer::Max ? -std::numeric_limits<float>::infinity()
                                         : r == Reducer::Min ? std::numeric_limits<float>::infinity() : 0.0f;
    for (int64_t t = 0; t < T; ++t) o[t] = init;
    for (int k = lo; k <= hi; ++k) {
      const int64_t t0 = std::max<int64_t>(0, -k), t1 = std::min<int64_t>(T, T - k);
      if (r == Reducer::Max) for (int64_t t = t0; t < t1; ++t) o[t] = x[t + k] > o[t] ? x[t + k] : o[t];
      else if (r == Reducer::Min) for (int64_t t = t0; t < t1; ++t) o[t] = x[t + k] < o[t] ? x[t + k] : o[t];
      else for (int64_t t = t0; t < t1; ++t) o[t] += x[t + k];
    }
    if (r == Reducer::Mean) {
      const float inv = 1.0f / static_cast<float>(hi - lo + 1);
      for (int64_t t = 0; t < T; ++t) o[t] *= inv;
    }
    if (extreme)  // tokens whose whole window lies outside [0, T)
      for (int64_t t = 0; t < T; ++t)
        if (t + hi < 0 || t + lo >= T) o[t] = 0.0f;
  });
}

void normalise(const Layout& L, const Node& nd, const Buf& A, float* out) {
  const unsigned shapes[1] = {A.shape};
  const int64_t T = L.ext[kT];
  for_rows<1>(L, nd.shape, shapes, [&](int64_t o, const int64_t* offs) {
    const float* x = A.data + offs[0];
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += x[t];
    const float inv = s != 0.0 ? static_cast<float>(1.0 / s) : 0.0f;
    for (int64_t t = 0; t < T; ++t) out[o + t] = x[t] * inv;
  });
}

}  // namespace

namespace {

// Rename: a view of the operand when its axes keep their order and extents, else a gather.
void rename(const Layout& L, const Node& nd, const Buf& A, Buf& B, BufferPool& pool) {
  int last = -1;
  bool view = true;
  int64_t ast[kNumAxes], src[kNumAxes] = {};
  L.strides(A.shape, ast);
  for (int i = 0; i < kNumAxes; ++i) {
    if (!(A.shape & (1u << i))) continue;
    const int to = rename_target(nd, i);
    view = view && to > last && L.ext[to] == L.ext[i];
    last = to;
    src[to] = ast[i];
  }
  if (view) {
    B.data = A.data;
    return;
  }
  B.own = pool.take(static_cast<size_t>(L.size(nd.shape)));
  B.data = B.own.data();
  int64_t e[kOuter];
  const int64_t rows = L.rows(nd.shape, e), n = L.tokens(nd.shape);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c[kOuter];
    row_coordinates(r, e, c);
    const float* a = A.data + dot(c, src);
    float* o = B.own.data() + r * n;
    for (int64_t t = 0; t < n; ++t) o[t] = a[t * src[kT]];
  }
}

// One evaluation: computes node by node; token-pair nodes and fused products are computed where
// they are used (token_pairs.h, contraction.h).
class Evaluator {
 public:
  Evaluator(const LoweredProgram& p, const EvalInputs& in, int G) : p_(p), in_(in), G_(G), fused_(fused_products(p)) {}

  std::vector<float> run(const Layout& L) {
    const std::vector<int> last_use = physical_last_use(p_, fused_);
    std::vector<Buf> bufs(p_.nodes.size());
    BufferPool& pool = buffer_pool();
    const ComputeNode compute = [this](int i, const Node& nd, const Layout& layout, std::vector<Buf>& b) { this->compute(i, nd, layout, b); };
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const Node& nd = p_.nodes[i];
      if (is_token_pair(nd.shape) || fused_[i]) continue;  // evaluated by its users
      if (is_pair_exit(p_, static_cast<int>(i))) evaluate_pair_exit(p_, L, static_cast<int>(i), fused_, bufs, compute);
      else compute(static_cast<int>(i), nd, L, bufs);
      // Free what this node read last (operands, or the leaves of its token-pair operands).
      for (size_t o = 0; o < i; ++o)
        if (last_use[o] == static_cast<int>(i) && static_cast<int>(o) != p_.output) pool.give(bufs[o].own);
    }
    const Buf& out = bufs[static_cast<size_t>(p_.output)];
    std::vector<float> result(out.data, out.data + L.size(out.shape));
    for (Buf& b : bufs) pool.give(b.own);
    return result;
  }

 private:
  // One node's value into bufs[i] (its buffer from the pool, or a signal read in place).
  void compute(int i, const Node& nd, const Layout& L, std::vector<Buf>& bufs) {
    Buf& B = bufs[static_cast<size_t>(i)];
    B.shape = nd.shape;
    const int64_t size = L.size(nd.shape);
    const EvalInputs& in = in_;
    auto alloc = [&] { return take_buffer(B, size); };
    switch (nd.op) {
      case NodeOp::Const: alloc()[0] = nd.value; break;
      case NodeOp::Scalar: alloc()[0] = in.scalars[static_cast<int>(nd.scalar)]; break;
      case NodeOp::Load: load(nd, L, B, size); break;
      case NodeOp::AxisIndex: {  // a single axis: its index, 0 .. extent - 1
        float* o = alloc();
        for (int64_t j = 0; j < size; ++j) o[j] = static_cast<float>(j);
        break;
      }
      case NodeOp::Random: {
        float* o = alloc();
        const auto layer = static_cast<uint32_t>(in.layer), kv_head = static_cast<uint32_t>(in.heads[0].kv_head);
        const int32_t* pos = in.heads[0].position;
        for (int64_t t = 0; t < size; ++t)
          o[t] = kv_dsl_random(in.seed, layer, kv_head, static_cast<uint32_t>(pos ? pos[t] : t));
        break;
      }
      case NodeOp::Unary: unary(nd.unary, bufs[nd.a].data, size, alloc()); break;
      case NodeOp::Binary: binary(L, nd, bufs[nd.a], bufs[nd.b], alloc()); break;
      case NodeOp::Select: select(L, nd, bufs[nd.a], bufs[nd.b], bufs[nd.c], alloc()); break;
      case NodeOp::Reduce:
        if (fused_[static_cast<size_t>(nd.a)]) {
          const Node& m = p_.nodes[static_cast<size_t>(nd.a)];
          contract(L, nd.reducer, nd.axes, bufs[m.a], bufs[m.b], nd.shape, alloc());
        } else if (nd.axes & kAxisT) {
          reduce_with_t(L, nd, bufs[nd.a], alloc());
        } else {
          reduce_outer(L, nd, bufs[nd.a], nd.b >= 0 ? bufs[nd.b].data : nullptr, alloc());
        }
        break;
      case NodeOp::Window: window(L, nd, bufs[nd.a], alloc()); break;
      case NodeOp::Normalise: normalise(L, nd, bufs[nd.a], alloc()); break;
      case NodeOp::Rename: rename(L, nd, bufs[nd.a], B, buffer_pool()); break;
      case NodeOp::Inverse: evaluate_inverse(bufs[nd.a].data, L.size(nd.shape), in.ext.d, alloc()); break;  // dsl/matrix_ops.h
      case NodeOp::Sort: sort(L, nd, bufs, size, alloc()); break;
      case NodeOp::Randn:
        evaluate_randn(in.seed, static_cast<uint32_t>(in.layer), static_cast<uint32_t>(in.heads[0].kv_head), in.ext.d, alloc());
        break;
      case NodeOp::Table: {
        if (nd.lo < 0 || nd.lo >= static_cast<int>(p_.tables.size())) throw RuntimeError("policy program reads a table it does not have");
        const TableData& tab = *p_.tables[static_cast<size_t>(nd.lo)];
        read_table(L, nd, tab, nd.a >= 0 ? bufs[nd.a].data : nullptr, alloc());
        break;
      }
    }
  }

  // B's own buffer of `size` floats from the pool.
  static float* take_buffer(Buf& B, int64_t size) {
    B.own = buffer_pool().take(static_cast<size_t>(size));
    B.data = B.own.data();
    return B.own.data();
  }

  // A Load node: the signal of every head of the group ([g][per head]), read in place where the
  // engine laid the heads side by side; positions from the heads' (or 0 .. T - 1).
  void load(const Node& nd, const Layout& L, Buf& B, int64_t size) const {
    const EvalInputs& in = in_;
    const int G = G_;
    const int s = static_cast<int>(nd.tensor);
    const int64_t per_head = L.size(nd.shape & ~kAxisG);
    if (nd.tensor == TensorSignal::Position) {
      float* o = take_buffer(B, size);
      for (int g = 0; g < G; ++g)
        for (int64_t t = 0; t < per_head; ++t)
          o[g * per_head + t] = static_cast<float>(in.heads[g].position ? in.heads[g].position[t] : t);
      return;
    }
    for (int g = 0; g < G; ++g)
      if (!in.heads[g].tensors[s] && per_head > 0)
        throw RuntimeError("policy reads " + kvevict::signal_label(nd.tensor) + " but the engine did not supply it");
    bool contiguous = true;  // the engine lays a layer's heads side by side: read them in place
    for (int g = 1; g < G; ++g) contiguous = contiguous && in.heads[g].tensors[s] == in.heads[0].tensors[s] + g * per_head;
    if (contiguous) {
      B.data = in.heads[0].tensors[s];
      return;
    }
    float* o = take_buffer(B, size);
    for (int g = 0; g < G; ++g) std::copy(in.heads[g].tensors[s], in.heads[g].tensors[s] + per_head, o + g * per_head);
  }

  // A Unary node over `size` elements.
  static void unary(UnaryFn f, const float* a, int64_t size, float* o) {
    if (f == UnaryFn::Log) {  // CAKE's entropy takes a log of every window-attention entry
      constexpr int64_t kChunk = 1 << 14;
#pragma omp parallel for schedule(static) if (size >= (1 << 18))
      for (int64_t j = 0; j < size; j += kChunk)
        simd::log_array(a + j, std::min(kChunk, size - j), o + j, [](float x) { return apply_unary(UnaryFn::Log, x); });
      return;
    }
#pragma omp parallel for schedule(static) if (size >= (1 << 18))
    for (int64_t j = 0; j < size; ++j) o[j] = apply_unary(f, a[j]);
  }

  // A Sort node (dsl/sort_ops.h): the operand as [outer][n][inner] around the sorted axis.
  void sort(const Layout& L, const Node& nd, const std::vector<Buf>& bufs, int64_t size, float* o) const {
    const unsigned shape = p_.nodes[static_cast<size_t>(nd.a)].shape;
    int64_t st[kNumAxes];
    L.strides(shape, st);
    const int k = kvevict::axis_index(nd.axes);
    const int64_t n = L.ext[k], inner = st[k], outer = n > 0 ? L.size(shape) / (n * inner) : 0;
    const float level = nd.b >= 0 ? bufs[nd.b].data[0] : 0.0f;
    if (nd.sort == SortFn::Quantile && n == 0) std::fill(o, o + size, 0.0f);
    evaluate_sort(nd.sort, bufs[nd.a].data, outer, n, inner, level, o);
  }

  // A Table node (lowered.h): element j of its shape [g?, h?, d?, e?, c?] (layout of the axis
  // table) reads the table at (row, layer, kv_head or g, (kv_head or g) * G + h, d, e, c).
  void read_table(const Layout& L, const Node& nd, const TableData& tab, const float* row, float* o) const {
    const long long kv_head = static_cast<long long>(in_.scalars[static_cast<int>(ScalarSignal::KvHead)]);
    std::array<long long, kNumTableAxes> idx{};
    idx[static_cast<int>(TableAxis::Layer)] = in_.layer;
    // The row: nearest integer; NaN or beyond the long long range reads outside the table (0).
    const double r = row ? static_cast<double>(row[0]) : 0.0;
    idx[static_cast<int>(TableAxis::Index)] = std::isfinite(r) && std::fabs(r) < 1e15 ? std::llround(r) : -1;
    int64_t stride[kNumAxes];
    L.strides(nd.shape, stride);
    const int64_t size = L.size(nd.shape);
    auto coord = [&](int64_t j, int axis) { return stride[axis] ? (j / stride[axis]) % L.ext[axis] : 0; };
    for (int64_t j = 0; j < size; ++j) {
      const long long k = (nd.shape & kAxisG) ? coord(j, kvevict::kAxisIndexG) : kv_head;
      idx[static_cast<int>(TableAxis::KvHead)] = k;
      idx[static_cast<int>(TableAxis::Head)] = k * in_.ext.h + coord(j, kvevict::kAxisIndexH);  // h: the group's query heads
      idx[static_cast<int>(TableAxis::D)] = coord(j, kvevict::kAxisIndexD);
      idx[static_cast<int>(TableAxis::E)] = coord(j, kvevict::kAxisIndexE);
      idx[static_cast<int>(TableAxis::C)] = coord(j, kvevict::kAxisIndexC);
      o[j] = tab.at(idx);
    }
  }

  const LoweredProgram& p_;
  const EvalInputs& in_;
  const int G_;
  const std::vector<bool> fused_;
};

}  // namespace

std::vector<float> evaluate(const LoweredProgram& p, const EvalInputs& in) {
  if (p.output < 0 || p.nodes.empty()) throw RuntimeError("policy program is empty (it did not check)");
  const int G = p.layer_context ? static_cast<int>(in.heads.size()) : 1;
  if (in.heads.size() != static_cast<size_t>(G) || G < 1) throw RuntimeError("policy evaluation: wrong number of head signal sets");
  if (in.ext.t < 0 || in.ext.q < 0 || in.ext.h < 1 || in.ext.d < 0 || in.ext.c < 0) throw RuntimeError("policy evaluation: invalid extents");
  // Extents in the order of the axis table: e is a second channel axis (head_dim), c the model
  // dimension, s a second token axis (T).
  Layout L{};
  const int extents[kNumAxes] = {G, in.ext.h, in.ext.q, in.ext.d, in.ext.d, in.ext.c, in.ext.t, in.ext.t};
  static_assert(kvevict::kAxisIndexE == 4 && kvevict::kAxisIndexC == 5 && kvevict::kAxisIndexS == 6 && kNumAxes == 8, "extents follow KVEVICT_AXES");
  std::copy(extents, extents + kNumAxes, L.ext);
  return Evaluator(p, in, G).run(L);
}

void evaluate_scores(const LoweredProgram& p, const EvalInputs& in, float* out) {
  std::vector<float> r = evaluate(p, in);
  const int64_t T = in.ext.t;
  const bool per_token = p.nodes[p.output].shape & kAxisT;
  for (int64_t t = 0; t < T; ++t) {
    const float v = per_token ? r[t] : r[0];
    out[t] = std::isnan(v) ? -std::numeric_limits<float>::infinity() : v;
  }
}

}  // namespace kvevict::dsl
