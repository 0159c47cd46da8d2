#pragma once
// Appends nodes to a LoweredProgram with constant folding (operations on constants become
// constants; a select on a constant condition becomes the chosen branch) and common
// sub-expression sharing (an identical node is emitted once: mean(q: A[h,q,t]) used by two
// definitions is computed once).
#include <cstdint>
#include <map>
#include <tuple>

#include "dsl/lowered.h"

namespace kvevict::dsl {

class ProgramBuilder {
 public:
  explicit ProgramBuilder(bool layer_context) { program_.layer_context = layer_context; }
  int constant(float v);
  int scalar(ScalarSignal s);
  int load(TensorSignal s);
  int axis_index(unsigned axis);
  int random();
  int unary(UnaryFn f, int a);
  int binary(BinaryFn f, int a, int b);
  int select(int cond, int a, int b);
  int reduce(Reducer r, unsigned axes, int a);
  int window(Reducer r, int lo, int hi, int a);
  int normalise(int a);
  // `a` with its axes renamed by the packed map (lowered.h: rename_target); `a` itself when the
  // map moves none of a's axes.
  int rename(int a, int map);
  int inverse(int a);  // the SPD inverse over (d, e) of a (dsl/matrix_ops.h); a has both axes
  int randn();         // randn[d, e] (core/engine/gaussian_rng.h)
  // A rank statistic of a along the one axis `axis` (dsl/sort_ops.h); level: Quantile's scalar p.
  int sort(SortFn f, unsigned axis, int a, int level = -1);
  // A read of table `index` of `tables` (set_tables) at the program's (layer, kv_head[, d]).
  // along_g: kv_head along axis g (layer_weight); row: the scalar node of the index axis (-1: none).
  int table(int index, bool along_g = false, int row = -1);
  void set_tables(const TableList& tables) { program_.tables = tables; }
  const Node& node(int i) const { return program_.nodes[i]; }
  int size() const { return static_cast<int>(program_.nodes.size()); }
  // Gives nodes [first, size()) that have no position yet the position (line, col): called after
  // an expression is lowered, so operands keep their own (inner) positions.
  void locate(int first, int line, int col);
  bool is_constant(int i) const { return program_.nodes[i].op == NodeOp::Const; }
  LoweredProgram finish(int output);

 private:
  int add(Node n);
  LoweredProgram program_;
  std::map<std::tuple<int, unsigned, int, int, int, uint32_t, int, int, int>, int> seen_;  // value by bit pattern (NaN-safe)
};

}  // namespace kvevict::dsl
