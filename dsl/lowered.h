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
//   t  cached token                  extent T (cache length)
// A shape is a bit mask of axes. A tensor is stored densely, row-major, with its axes in the
// canonical order g, h, q, d, t (t innermost, so every inner loop runs over contiguous tokens;
// reductions over d are outer reductions like those over h and q).
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
//   Table        tables[lo] at (layer, kv_head, d) (dsl/table_data.h): shape [d] when the table has
//                axis d, else scalar (plus axis g in layer_weight programs, where kv_head runs
//                along g). layer and kv_head are otherwise the program's own (its scalars); an
//                index outside the table reads 0 (the engine checks the extents before a run)
//
// REDUCTION ORDER (determinism): reductions over g, h and q only accumulate in float in
// increasing index order (canonical g, h, q nesting), each t independently; mean = sum * (1 /
// count) in float. A reduction whose axes include t accumulates in double, visiting the operand
// in canonical order. Window sums accumulate in float in increasing k.
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
using kvevict::kNumTensorSignals;
using kvevict::SignalSet;
using kvevict::TensorSignal;  // the signal table: core/engine/signals.h
std::string shape_name(unsigned shape);   // "[h, q, t]", "scalar"

using kvevict::kNumScalarSignals;
using kvevict::ScalarSignal;

// Shape of a tensor signal in a per-head program; layer_weight programs add axis g.
constexpr unsigned tensor_signal_shape(TensorSignal s) { return kvevict::signal_axes(s); }

enum class NodeOp : uint8_t { Const, Scalar, Load, AxisIndex, Random, Unary, Binary, Select, Reduce, Window, Normalise, Table };

enum class UnaryFn : uint8_t { Neg, Not, Exp, Log, Sqrt, Abs, Floor, Ceil, Round };
enum class BinaryFn : uint8_t { Add, Sub, Mul, Div, Pow, Min, Max, Lt, Le, Gt, Ge, Eq, Ne, And, Or };
enum class Reducer : uint8_t { Sum, Mean, Var, Max, Min, Entropy };

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
  unsigned axes = 0;              // Reduce: the reduced axes; AxisIndex: the axis
  int lo = 0, hi = 0;             // Window: offsets, lo <= hi; Table: lo = index into LoweredProgram::tables
  // Where the expression that created the node starts in the policy file (1-based; 0 = unknown,
  // e.g. programs built directly). Not part of a node's identity: a shared sub-expression keeps
  // the position of its first occurrence. The CUDA generator turns it into #line directives.
  int line = 0, col = 0;
};

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
