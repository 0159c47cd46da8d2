#include "dsl/program_builder.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <sstream>

#include "dsl/elementwise.h"

namespace kvevict::dsl {

std::string shape_name(unsigned shape) {
  if (shape == 0) return "scalar";
  std::string s = "[";
  for (const auto& axis : kvevict::kAxisTable)
    if (shape & axis.bit) s += (s.size() > 1 ? ", " : "") + std::string(axis.dsl_name);
  return s + "]";
}

int ProgramBuilder::add(Node n) {
  int sub = 0;
  switch (n.op) {
    case NodeOp::Scalar: sub = static_cast<int>(n.scalar); break;
    case NodeOp::Load: sub = static_cast<int>(n.tensor); break;
    case NodeOp::Unary: sub = static_cast<int>(n.unary); break;
    case NodeOp::Binary: sub = static_cast<int>(n.binary); break;
    case NodeOp::Reduce: case NodeOp::Window: sub = static_cast<int>(n.reducer); break;
    case NodeOp::Sort: sub = static_cast<int>(n.sort); break;
    default: break;
  }
  uint32_t bits;
  std::memcpy(&bits, &n.value, sizeof bits);
  auto key = std::make_tuple(static_cast<int>(n.op), n.axes, n.a, n.b, n.c, bits, sub, n.lo, n.hi);
  auto it = seen_.find(key);
  if (it != seen_.end()) return it->second;
  program_.nodes.push_back(n);
  int id = static_cast<int>(program_.nodes.size()) - 1;
  seen_[key] = id;
  return id;
}

int ProgramBuilder::constant(float v) {
  Node n;
  n.op = NodeOp::Const;
  n.value = v;
  return add(n);
}

int ProgramBuilder::scalar(ScalarSignal s) {
  Node n;
  n.op = NodeOp::Scalar;
  n.scalar = s;
  return add(n);
}

int ProgramBuilder::load(TensorSignal s) {
  Node n;
  n.op = NodeOp::Load;
  n.tensor = s;
  n.shape = tensor_signal_shape(s) | (program_.layer_context ? kAxisG : 0u);
  program_.uses[static_cast<int>(s)] = true;
  return add(n);
}

int ProgramBuilder::axis_index(unsigned axis) {
  Node n;
  n.op = NodeOp::AxisIndex;
  n.axes = axis;
  n.shape = axis;
  return add(n);
}

int ProgramBuilder::random() {
  Node n;
  n.op = NodeOp::Random;
  n.shape = kAxisT;
  program_.uses_random = true;
  program_.uses[static_cast<int>(TensorSignal::Position)] = true;
  return add(n);
}

int ProgramBuilder::unary(UnaryFn f, int a) {
  if (is_constant(a)) return constant(apply_unary(f, node(a).value));
  Node n;
  n.op = NodeOp::Unary;
  n.unary = f;
  n.a = a;
  n.shape = node(a).shape;
  return add(n);
}

int ProgramBuilder::binary(BinaryFn f, int a, int b) {
  if (is_constant(a) && is_constant(b)) return constant(apply_binary(f, node(a).value, node(b).value));
  Node n;
  n.op = NodeOp::Binary;
  n.binary = f;
  n.a = a;
  n.b = b;
  n.shape = node(a).shape | node(b).shape;
  return add(n);
}

int ProgramBuilder::select(int cond, int a, int b) {
  if (is_constant(cond)) return node(cond).value != 0.0f ? a : b;
  Node n;
  n.op = NodeOp::Select;
  n.a = cond;
  n.b = a;
  n.c = b;
  n.shape = node(cond).shape | node(a).shape | node(b).shape;
  return add(n);
}

int ProgramBuilder::reduce(Reducer r, unsigned axes, int a) {
  Node n;
  n.op = NodeOp::Reduce;
  n.reducer = r;
  n.axes = axes;
  n.a = a;
  n.shape = node(a).shape & ~axes;
  if (r == Reducer::Var) {
    // Reuse the mean of the same operand when the program already computes it (CAKE's m and v):
    // the variance then needs one pass over the operand instead of two.
    Node mean = n;
    mean.reducer = Reducer::Mean;
    uint32_t bits;
    std::memcpy(&bits, &mean.value, sizeof bits);
    auto it = seen_.find(std::make_tuple(static_cast<int>(NodeOp::Reduce), axes, a, -1, -1, bits, static_cast<int>(Reducer::Mean), 0, 0));
    if (it != seen_.end() && !(axes & kAxisT)) n.b = it->second;
  }
  return add(n);
}

int ProgramBuilder::window(Reducer r, int lo, int hi, int a) {
  Node n;
  n.op = NodeOp::Window;
  n.reducer = r;
  n.lo = lo;
  n.hi = hi;
  n.a = a;
  n.shape = node(a).shape;
  return add(n);
}

int ProgramBuilder::normalise(int a) {
  Node n;
  n.op = NodeOp::Normalise;
  n.a = a;
  n.shape = node(a).shape;
  return add(n);
}

int ProgramBuilder::inverse(int a) {
  Node n;
  n.op = NodeOp::Inverse;
  n.a = a;
  n.shape = node(a).shape;
  return add(n);
}

int ProgramBuilder::sort(SortFn f, unsigned axis, int a, int level) {
  Node n;
  n.op = NodeOp::Sort;
  n.sort = f;
  n.axes = axis;
  n.a = a;
  n.b = f == SortFn::Quantile ? level : -1;
  n.shape = f == SortFn::Quantile ? node(a).shape & ~axis : node(a).shape;
  return add(n);
}

int ProgramBuilder::randn() {
  Node n;
  n.op = NodeOp::Randn;
  n.shape = kAxisD | kAxisE;
  program_.uses_random = true;
  return add(n);
}

int ProgramBuilder::table(int index, bool along_g, int row) {
  Node n;
  n.op = NodeOp::Table;
  n.lo = index;
  n.a = row;
  const TableData& t = *program_.tables.at(static_cast<size_t>(index));
  n.shape = (t.has_axis(TableAxis::Head) ? kAxisH : 0u) | (t.has_axis(TableAxis::D) ? kAxisD : 0u) |
            (t.has_axis(TableAxis::E) ? kAxisE : 0u) | (t.has_axis(TableAxis::C) ? kvevict::kAxisC : 0u) |
            (along_g ? kAxisG : 0u);
  return add(n);
}

int ProgramBuilder::rename(int a, int map) {
  if (map == rename_identity()) return a;
  if (is_constant(a)) return a;
  Node n;
  n.op = NodeOp::Rename;
  n.a = a;
  n.lo = map;
  n.shape = renamed_shape(map, node(a).shape);
  if (n.shape == node(a).shape) {  // every renamed axis is absent from the operand (broadcast)
    bool moves = false;
    for (int i = 0; i < kNumAxes; ++i)
      if ((node(a).shape & (1u << i)) && rename_target(n, i) != i) moves = true;
    if (!moves) return a;
  }
  return add(n);
}

void ProgramBuilder::locate(int first, int line, int col) {
  for (int i = first; i < size(); ++i) {
    Node& n = program_.nodes[i];
    if (n.line == 0) {
      n.line = line;
      n.col = col;
    }
  }
}

LoweredProgram ProgramBuilder::finish(int output) {
  // Keep only the nodes the output depends on. A branch dropped by a constant condition (an enum
  // parameter such as cake's decode_indicator) must neither run nor count as a signal the policy
  // reads: the engine computes, and the interpreter demands, exactly the signals in `uses`.
  LoweredProgram out;
  out.layer_context = program_.layer_context;
  out.tables = program_.tables;
  if (output < 0) {
    out.nodes = program_.nodes;
    std::copy(std::begin(program_.uses), std::end(program_.uses), std::begin(out.uses));
    out.uses_random = program_.uses_random;
    return out;
  }
  std::vector<bool> live(program_.nodes.size(), false);
  live[output] = true;
  for (int i = output; i >= 0; --i) {  // operands precede their users (topological order)
    if (!live[i]) continue;
    for (int o : {program_.nodes[i].a, program_.nodes[i].b, program_.nodes[i].c})
      if (o >= 0) live[o] = true;
  }
  std::vector<int> remap(program_.nodes.size(), -1);
  for (int i = 0; i <= output; ++i) {
    if (!live[i]) continue;
    Node n = program_.nodes[i];
    for (int* o : {&n.a, &n.b, &n.c})
      if (*o >= 0) *o = remap[*o];
    if (n.op == NodeOp::Load) out.uses[static_cast<int>(n.tensor)] = true;
    if (n.op == NodeOp::Randn) out.uses_random = true;
    if (n.op == NodeOp::Random) out.uses_random = out.uses[static_cast<int>(TensorSignal::Position)] = true;
    remap[i] = static_cast<int>(out.nodes.size());
    out.nodes.push_back(n);
  }
  out.output = remap[output];
  return out;
}

std::string LoweredProgram::dump() const {
  static const char* ops[] = {"const", "scalar", "load", "axis_index", "random", "unary", "binary",
                              "select", "reduce", "window", "normalise", "table", "rename", "inverse", "randn", "sort"};
  std::ostringstream out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    out << '%' << i << ' ' << shape_name(n.shape) << " = " << ops[static_cast<int>(n.op)];
    switch (n.op) {
      case NodeOp::Const: out << ' ' << n.value; break;
      case NodeOp::Scalar: out << " #" << static_cast<int>(n.scalar); break;
      case NodeOp::Load: out << " #" << static_cast<int>(n.tensor); break;
      case NodeOp::AxisIndex: out << ' ' << shape_name(n.axes); break;
      case NodeOp::Unary: out << " fn" << static_cast<int>(n.unary) << " %" << n.a; break;
      case NodeOp::Binary: out << " fn" << static_cast<int>(n.binary) << " %" << n.a << " %" << n.b; break;
      case NodeOp::Select: out << " %" << n.a << " %" << n.b << " %" << n.c; break;
      case NodeOp::Reduce: out << " r" << static_cast<int>(n.reducer) << ' ' << shape_name(n.axes) << " %" << n.a; break;
      case NodeOp::Window: out << " r" << static_cast<int>(n.reducer) << ' ' << n.lo << ".." << n.hi << " %" << n.a; break;
      case NodeOp::Normalise: out << " %" << n.a; break;
      case NodeOp::Rename: out << " %" << n.a; break;
      case NodeOp::Inverse: out << " %" << n.a; break;
      case NodeOp::Sort:
        out << " s" << static_cast<int>(n.sort) << ' ' << shape_name(n.axes) << " %" << n.a;
        if (n.b >= 0) out << " %" << n.b;
        break;
      case NodeOp::Table: out << ' ' << (n.lo >= 0 && n.lo < static_cast<int>(tables.size()) ? tables[n.lo]->name : "?"); break;
      default: break;
    }
    out << '\n';
  }
  out << "output %" << output << '\n';
  return out.str();
}

}  // namespace kvevict::dsl
