#pragma once
// The lowered form of a policy program: the one representation that both the CPU interpreter
// (dsl/interpreter.h, the reference semantics) and the CUDA code generator consume.
//
// A LoweredProgram is a flat list of nodes in topological order (every operand index is smaller
// than the node's own index); node `output` is the result. There are no pointers, no loops with
// data-dependent bounds and no user-controlled indexing: every node computes one dense tensor
// whose shape is a set of named axes, and every loop bound is an axis extent or a constant window.
//
// AXES AND LAYOUT
//   g  KV head of the layer          extent n_kv_heads (layer_weight programs only)
//   h  query head within the group   extent G
//   q  window query                  extent W (rows of the window attention)
//   d  channel of a head vector      extent head_dim (keys K, K_pre and values V)
//   e  a second channel axis         extent head_dim (C[d, e]: two channels at once)
//   c  the model dimension           extent n_embd (hidden[c, t]: the layer's attention input)
//   s  a second cached-token axis    extent T (pairwise terms S[s, t])
//   t  cached token                  extent T (cache length)
// (The table is KVEVICT_AXES in core/engine/signals.h.) A shape is a bit mask of axes. A tensor
// is stored densely, row-major, with its axes in the canonical order g, h, q, d, e, c, s, t (t
// innermost, so every inner loop runs over contiguous tokens; reductions over d, e, c and s are
// outer reductions like those over h and q).
// A scalar has shape 0 and holds one value.
//
// NODES (all values are float32; booleans are 1.0 / 0.0)
//   Const        value                                          shape 0
//   Scalar       a per-(layer, head) scalar signal (T, W, G, layer, ...)          shape 0
//   Load         a tensor signal (window attention, key norms, ...)              its signal shape
//   AxisIndex    the index along axis `axes` as a number (t: cache slot 0..T-1)    shape = axes
//   Random       uniform (0, 1): kv_dsl_random (core/engine/counter_rng.h, Philox4x32-10) keyed by
//                (seed, layer, kv_head, position[t])
//   Unary        fn(a)                          elementwise            shape = shape(a)
//   Binary       fn(a, b)                       elementwise, broadcast shape = shape(a) | shape(b)
//   Select       a ? b : c  (a != 0)            elementwise, broadcast shape = union of the three
//   Reduce       reducer over the axes in `axes` of a: shape = shape(a) & ~axes
//                  sum, mean (sum / count), max, min,
//                  var: unbiased, sum((x - mean)^2) / (count - 1); 0 when count < 2 (CAKE).
//                       Optional operand b: a Mean node of the same operand and axes whose
//                       values are the mean (saves one pass; the result is identical)
//                  entropy: -sum(x * log(x)) over entries with x > 0
//   Window       reducer over token offsets k = lo..hi of a (a must have axis t):
//                  out[..., t] = reduce over k with 0 <= t + k < T of a[..., t + k]
//                PADDING RULE: offsets that leave [0, T) read nothing. For sum they add 0; for
//                mean they add 0 and the divisor stays the window length hi - lo + 1 (PyTorch
//                avg_pool1d with zero padding counted, as CAKE and SnapKV); max and min skip them
//                (PyTorch max_pool1d pads with -inf). If no offset is in range the result is 0.
//   Normalise    a / sum over t of a (per slice over the other axes); 0 where that sum is 0
//   Rename       a with its axes renamed to axes of the same kind (K[d, t] read as K[e, s]): the
//                operand's axis i is the result's axis rename_target(node, i) (packed in `lo`, 3
//                bits per axis); the values are a's, only the axis labels change. The checker
//                never renames both axes of a token pair (no transposed T x T tensor).
//   Inverse      the inverse of each symmetric positive-definite matrix over the channel axes (d, e)
//                of a (shape = shape(a), which has d and e and no token axis: the matrices are
//                contiguous): Cholesky in double with a documented ridge fallback, NaN when that
//                fails (dsl/matrix_ops.h)
//   Sort         a rank statistic along ONE axis (`axes`, one bit) of a (dsl/sort_ops.h): `sort`
//                Rank: 0-based rank in descending order (ties: lower index first; NaN last),
//                shape = shape(a); SortedCumsum: the sum of a over the elements ranked before
//                each element, shape = shape(a); Quantile: the b-quantile (b a scalar node)
//                with linear interpolation, shape = shape(a) & ~axes. a is never a token pair
//   Randn        standard normal, shape [d, e]: kv_dsl_randn (core/engine/gaussian_rng.h) keyed by
//                (seed, layer, kv_head, d, e), the Gaussian sketch
//   Table        tables[lo] (dsl/table_data.h) at (index, layer, kv_head, head, d, e, c): shape [h?, d?,
//                e?, c?] for the table's head / d / e / c axes (plus axis g in layer_weight programs, where
//                kv_head runs along g); head = kv_head * G + h. a (>= 0 iff the table has the index
//                axis) is the scalar node of the index, rounded to the nearest integer. layer and
//                kv_head are otherwise the program's own (its scalars); an index outside the table
//                reads 0 (the engine checks the extents of the model's axes before a run)
//
// REDUCTION ORDER (determinism): reductions over axes other than t only accumulate in float in
// increasing index order (canonical g, h, q, d, e, c, s nesting), each t independently; mean = sum *
// (1 / count) in float. A reduction whose axes include t accumulates in double, visiting the
// operand in canonical order. Window sums accumulate in float in increasing k.
// CONTRACTIONS: sum/mean over axes R of a * b (a Binary Mul node used only by such reductions)
// is computed without materialising the product, in exactly the order above (each product
// rounded to float, then accumulated), so fusing changes no bit; the inner loop runs over
// contiguous t in blocks of kContractionBlock tokens (cache blocking).
// TOKEN PAIRS: a node whose shape has both s and t is never materialised. A reduction that
// removes s or t from such a node (an "exit") evaluates its token-pair operands tile by tile:
// kPairTileRows-row blocks of s (fewer when one s-row is large: the tile holds at most
// kPairTileElements floats per node), all of t. An exit that keeps s writes each tile's rows; an
// exit over s accumulates tile after tile with s OUTERMOST (for s, for the other reduced
// coordinates in canonical order, t inner; float, or double when t is reduced too; mean = sum *
// (1 / count) in float, or sum / count in double), so results do not depend on the tile size or
// the thread count. var over s of a token-pair body is refused by the checker. Memory: O(T x head_dim) for the signals plus O(kPairTileElements) per
// token-pair node of the exit's operand; each exit recomputes the token-pair nodes it needs.
// Two exits take shortcuts with the same bits (dsl/token_pairs.h): the last/first index where a
// condition holds (a scan that stops per row) and a sum over s selected at one column per row.
// A code generator must keep these orders to reproduce the interpreter bit for bit; within
// tolerance, any order is acceptable.
//
// Results: the interpreter replaces NaN in a score program's output by -infinity (never kept
// ahead of a real score), so log(0) or 0/0 in a policy cannot poison the engine's top-k.
#include <cstdint>
#include <string>
#include <vector>

#include "core/engine/signals.h"
#include "dsl/table_data.h"

namespace kvevict::dsl {

using kvevict::kAllAxes;
using kvevict::kAxisG;
using kvevict::kAxisH;
using kvevict::kAxisQ;
using kvevict::kAxisD;
using kvevict::kNumAxes;
using kvevict::kAxisT;
using kvevict::kAxisE;
using kvevict::kAxisS;
using kvevict::kAxisC;
using kvevict::is_token_pair;
using kvevict::kNumTensorSignals;
using kvevict::SignalSet;
using kvevict::TensorSignal;  // the signal table: core/engine/signals.h
std::string shape_name(unsigned shape);   // "[h, q, t]", "scalar"

using kvevict::kNumScalarSignals;
using kvevict::ScalarSignal;

// Shape of a tensor signal in a per-head program; layer_weight programs add axis g.
constexpr unsigned tensor_signal_shape(TensorSignal s) { return kvevict::signal_axes(s); }

enum class NodeOp : uint8_t { Const, Scalar, Load, AxisIndex, Random, Unary, Binary, Select, Reduce, Window, Normalise, Table, Rename, Inverse, Randn, Sort };

enum class UnaryFn : uint8_t { Neg, Not, Exp, Log, Sqrt, Abs, Floor, Ceil, Round, Sin, Cos, Gelu };
enum class BinaryFn : uint8_t { Add, Sub, Mul, Div, Pow, Min, Max, Lt, Le, Gt, Ge, Eq, Ne, And, Or };
enum class Reducer : uint8_t { Sum, Mean, Var, Max, Min, Entropy };
enum class SortFn : uint8_t { Rank, SortedCumsum, Quantile };  // dsl/sort_ops.h

struct Node {
  NodeOp op = NodeOp::Const;
  unsigned shape = 0;
  int a = -1, b = -1, c = -1;     // operand node indices
  float value = 0;                // Const
  ScalarSignal scalar = ScalarSignal::T;
  TensorSignal tensor = TensorSignal::KeyNorm;
  UnaryFn unary = UnaryFn::Neg;
  BinaryFn binary = BinaryFn::Add;
  Reducer reducer = Reducer::Sum;
  SortFn sort = SortFn::Rank;     // Sort
  unsigned axes = 0;              // Reduce: the reduced axes; AxisIndex, Sort: the axis
  int lo = 0, hi = 0;             // Window: offsets, lo <= hi; Table: lo = index into LoweredProgram::tables
  // Where the expression that created the node starts in the policy file (1-based; 0 = unknown,
  // e.g. programs built directly). Not part of a node's identity: a shared sub-expression keeps
  // the position of its first occurrence. The CUDA generator turns it into #line directives.
  int line = 0, col = 0;
};

// Rename: the result axis (an index into kAxisTable) that the operand's axis i becomes.
inline int rename_target(const Node& n, int i) { return (n.lo >> (3 * i)) & 7; }
inline int rename_identity() {
  int map = 0;
  for (int i = 0; i < kNumAxes; ++i) map |= i << (3 * i);
  return map;
}
// The shape of an operand of shape `shape` renamed by the packed map.
inline unsigned renamed_shape(int map, unsigned shape) {
  unsigned out = 0;
  for (int i = 0; i < kNumAxes; ++i)
    if (shape & (1u << i)) out |= 1u << ((map >> (3 * i)) & 7);
  return out;
}

// Interpreter tiling constants (see TOKEN PAIRS and CONTRACTIONS above).
constexpr int kPairTileRows = 64;
constexpr int64_t kPairTileElements = int64_t(1) << 15;  // 128 KiB: a tile's nodes stay in L2
constexpr int64_t kContractionBlock = 512;
// One row of s of a token-pair node above this many floats is a run-time error (a 128-channel
// pair at T = 2^17 is 2^24): the checker's shape rule keeps rows at max(G, head_dim) x T.
constexpr int64_t kPairRowLimit = int64_t(1) << 25;

struct LoweredProgram {
  std::vector<Node> nodes;
  int output = -1;
  bool layer_context = false;         // layer_weight program: axis g exists, tensors carry it
  SignalSet uses{};                   // which tensor signals are read
  bool uses_random = false;
  TableList tables;                   // the policy's tables (Table nodes index them); shared, read-only
  std::string dump() const;           // one line per node, for tests and code-generator debugging
};

}  // namespace kvevict::dsl
