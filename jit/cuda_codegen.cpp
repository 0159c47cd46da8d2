// The CUDA code generator; scheme and limits in cuda_codegen.h. Compiled only when the DSL's
// lowered form is part of the tree.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "jit/cuda_codegen.h"

#include <bit>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "dsl/matrix_ops.h"
#include "dsl/sort_ops.h"
#include "jit/cuda_expressions.h"
#include "jit/kernel_abi.h"

namespace kvevict::jit {

namespace {

using dsl::LoweredProgram;
using dsl::Node;
using dsl::NodeOp;
using dsl::Reducer;

// A node whose value at (h, q, t) is not a function of its operands at the same indices: calls
// to it stop the inlining of elementwise operands.
bool is_boundary(const Node& n) {
  return n.op == NodeOp::Reduce || n.op == NodeOp::Window || n.op == NodeOp::Normalise || n.op == NodeOp::Rename ||
         n.op == NodeOp::Sort || n.op == NodeOp::Inverse;
}
// A node that needs every token before any token's score: computed by a stage into scratch. The
// scratch slots cover (h, q, d); a value over s, e or c (a reduction over t that keeps s, a
// normalise of a token pair, a per-model-channel statistic) is computed by loops inside the thread
// instead (not staged). inverse() is a matrix stage (kernel_abi.h): its value depends on the whole
// d x e matrix of its operand, which does not depend on t, so it is factorised once per (h, q)
// before the tokens.
bool is_staged(const Node& n) {
  if (n.op == NodeOp::Inverse) return true;
  const bool token_quantile = n.op == NodeOp::Sort && n.sort == dsl::SortFn::Quantile && (n.axes & dsl::kAxisT);
  return ((n.op == NodeOp::Reduce && (n.axes & dsl::kAxisT)) || n.op == NodeOp::Normalise || token_quantile) &&
         !(n.shape & (dsl::kAxisS | dsl::kAxisE | dsl::kAxisC));
}

// The index variable of each axis in the generated functions (d is `c`, the channel; the model
// axis c is `mc`) and the extent of its loops. Axis g (layer_weight programs) is not a parameter:
// a function at KV head g takes head g's arguments (kv_head_args, kernel_abi.h), so `a.kv_head`
// is its g and a loop over g (`rg`) calls its operand with kv_head_args(a, rg).
const char* const kAxisVar[] = {"g", "h", "q", "c", "e", "mc", "s", "t"};
const char* const kAxisExtent[] = {"kv_layer_heads(a)", "a.group", "a.W", "a.head_dim", "a.head_dim", "a.n_embd", "a.T", "a.T"};
static_assert(sizeof(kAxisVar) / sizeof(kAxisVar[0]) == dsl::kNumAxes, "one variable per axis of KVEVICT_AXES");
static_assert(sizeof(kAxisExtent) / sizeof(kAxisExtent[0]) == dsl::kNumAxes, "one extent per axis of KVEVICT_AXES");
constexpr const char* kParams = "const KvScoreArgs& a, int h, int q, int c, int e, int mc, int s, int t";
constexpr const char* kArgs = "(a, h, q, c, e, mc, s, t)";

class ProgramEmitter {
 public:
  ProgramEmitter(CudaWriter& w, const LoweredProgram& p, std::string prefix, std::string file, SourceLocation where,
                 KernelOutput output)
      : w_(w), p_(p), prefix_(std::move(prefix)), file_(std::move(file)), where_(std::move(where)), output_(output) {}

  EmittedProgram emit() {
    if (p_.output < 0 || p_.output >= int(p_.nodes.size())) fail(-1, "the program is empty");
    if (p_.layer_context != (output_ == KernelOutput::Layer))
      fail(p_.output, p_.layer_context ? "a layer_weight program is generated as a layer entry only"
                                       : "only a layer_weight program has a layer entry");
    const Node& out = p_.nodes[p_.output];
    const KernelOutputInfo& kind = kernel_output_info(output_);
    if (out.shape & ~kind.axis) fail(p_.output, std::string(kind.shape_rule) + ", not " + dsl::shape_name(out.shape));
    // Functions needed: the output, every boundary node it reaches, and their operands.
    std::set<int> functions = {p_.output};
    for (int i = int(p_.nodes.size()) - 1; i >= 0; --i) {
      if (!functions.count(i)) continue;
      for (int j : inline_closure(i))
        if (j != i && is_boundary(p_.nodes[j])) functions.insert(j);
      if (is_boundary(p_.nodes[i])) functions.insert(p_.nodes[i].a);
      if (p_.nodes[i].op == NodeOp::Sort && p_.nodes[i].b >= 0) functions.insert(p_.nodes[i].b);  // quantile's level
    }
    // Staged nodes in index (= topological) order: a stage may read earlier stages' slots.
    for (int i : functions) {
      if (!is_staged(p_.nodes[i])) continue;
      if (is_split(i) && p_.nodes[i].op == NodeOp::Reduce && p_.nodes[i].reducer == Reducer::Var)
        stages_.push_back(i);  // a split variance's first step: its mean (kernel_abi.h, "Split stages")
      stage_of_[i] = int(stages_.size()), stages_.push_back(i);
      if (p_.nodes[i].op != NodeOp::Inverse) continue;
      matrix_of_[i] = matrices_.count++;
      matrices_.axes |= ((p_.nodes[i].shape & dsl::kAxisH) ? 1 : 0) | ((p_.nodes[i].shape & dsl::kAxisQ) ? 2 : 0);
    }
    for (int i : functions) emit_function(i);
    for (size_t s = 0; s < stages_.size(); ++s) emit_stage(int(s), stages_[s]);
    EmittedProgram result;
    result.stage_count = int(stages_.size());
    result.matrices = matrices_;
    if (!stages_.empty()) {
      result.stage_function = prefix_ + "_stage";
      line("KVEVICT_FN void " + result.stage_function + "(const KvScoreArgs& a, int stage, int h, int q, int c) {", where_);
      w_.indent();
      line("switch (stage) {", where_);
      for (size_t s = 0; s < stages_.size(); ++s)
        line("  case " + std::to_string(s) + ": " + stage_name(int(s)) + "(a, h, q, c); break;", where_);
      line("  default: break;", where_);
      line("}", where_);
      w_.dedent();
      line("}", where_);
    }
    emit_element_function(result);
    return result;
  }

 private:
  // Where node i came from: its own expression in the policy file when known, else the program.
  SourceLocation at(int i) const {
    if (i >= 0 && i < int(p_.nodes.size()) && p_.nodes[i].line > 0 && !file_.empty()) return {file_, p_.nodes[i].line};
    return where_;
  }
  [[noreturn]] void fail(int i, const std::string& what) const {
    std::string pos = file_;
    if (i >= 0 && i < int(p_.nodes.size()) && p_.nodes[i].line > 0)
      pos += ":" + std::to_string(p_.nodes[i].line) + ":" + std::to_string(p_.nodes[i].col);
    else if (where_.line > 0)
      pos += ":" + std::to_string(where_.line) + ":1";
    throw GenerateError(pos + ": error: cannot generate CUDA for the " + prefix_ + " program: " + what);
  }
  void line(const std::string& text, const SourceLocation& where) { w_.line(text, where); }

  // The function one thread of the entry calls: the output node at output index i (the token t or
  // the key channel c; kernel_abi.h, KernelOutput), every other index 0 (the output has no other
  // axis). A score's NaN becomes -inf; a channel score's NaN is kept, as the interpreter keeps it.
  void emit_element_function(EmittedProgram& result) {
    const KernelOutputInfo& kind = kernel_output_info(output_);
    const int out_axis = kind.axis ? kvevict::axis_index(kind.axis) : -1;  // -1: a layer's one value
    std::string call = fn(p_.output) + "(a";
    for (int k = 1; k < dsl::kNumAxes; ++k) {
      call += ", ";
      call += k == out_axis ? kAxisVar[k] : "0";
    }
    call += ")";
    result.output = output_;
    result.element_function = prefix_ + "_" + kind.element;
    const std::string index = out_axis > 0 ? std::string(", int ") + kAxisVar[out_axis] : "";
    line("KVEVICT_FN float " + result.element_function + "(const KvScoreArgs& a" + index + ") {", where_);
    w_.indent();
    line("const float v = " + call + ";", where_);
    line(kind.nan_to_minus_inf ? "return v != v ? -KVEVICT_INFINITY : v;  // NaN never outranks a real score"
                               : "return v;  // NaN kept: the channel selection ranks it lowest", where_);
    w_.dedent();
    line("}", where_);
  }
  std::string fn(int i) const { return prefix_ + "_n" + std::to_string(i); }
  // Appended rather than `"v" + to_string(i)`: GCC 12 misreports that form inlined here (-Wrestrict, GCC bug 105651).
  std::string var(int i) const { return std::string("v").append(std::to_string(i)); }
  std::string stage_name(int s) const { return prefix_ + "_stage" + std::to_string(s); }

  // Nodes computed inline in node i's function: i and, through elementwise edges, its operands,
  // stopping at (and including, as calls) boundary nodes. Sorted, so operands come first.
  std::vector<int> inline_closure(int i) const {
    std::set<int> seen;
    std::vector<int> stack = {i};
    while (!stack.empty()) {
      const int j = stack.back();
      stack.pop_back();
      if (!seen.insert(j).second) continue;
      const Node& n = p_.nodes[j];
      if (is_boundary(n)) continue;  // a call (j != i) or a loop whose operand is its own function
      for (int o : {n.a, n.b, n.c})
        if (o >= 0) stack.push_back(o);
    }
    return std::vector<int>(seen.begin(), seen.end());
  }

  // The scratch index of staged node i at (g, h, q, c): its stage's block, then
  // ((g * G + h) * Wp + q) * Cp + c for the axes the value has (the others are 0; c is the
  // channel, axis d; g is a.kv_head, layer_weight programs only). Reads and writes go through the
  // prelude's bounded kv_load / kv_store against the scratch's extent, n_stages * kv_stage_slots(a).
  std::string slot_index(int i) const {
    const unsigned shape = p_.nodes[i].shape;
    std::string head = (shape & dsl::kAxisH) ? "(long long)h" : "0LL";
    if (shape & dsl::kAxisG) head = "((long long)a.kv_head * a.group + " + std::string((shape & dsl::kAxisH) ? "h" : "0") + ")";
    return "(long long)" + std::to_string(stage_of_.at(i)) + " * kv_stage_slots(a) + " + "(" + head +
           " * kv_stage_wp(a) + " + ((shape & dsl::kAxisQ) ? "q" : "0") + ") * kv_stage_cp(a) + " +
           ((shape & dsl::kAxisD) ? "c" : "0");
  }
  std::string scratch_extent() const { return "(long long)" + std::to_string(stages_.size()) + " * kv_stage_slots(a)"; }
  std::string slot(int i) const { return "kv_load(a.scratch, " + slot_index(i) + ", " + scratch_extent() + ", 0.0f)"; }

  // Matrix stages (kernel_abi.h, "Matrix stages"): the arguments shared by the layout functions,
  // the whole scratch's extent, and the offset of matrix i's slot for (h, q) (its first entry).
  std::string layout_args() const {
    return std::to_string(stages_.size()) + ", " + std::to_string(matrices_.count) + ", " + std::to_string(matrices_.axes);
  }
  std::string matrix_extent() const { return "kv_scratch_floats(a, " + layout_args() + ")"; }
  std::string matrix_slot(int i) const {
    const unsigned shape = p_.nodes[i].shape;
    return "((long long)" + std::string((shape & dsl::kAxisH) ? "h" : "0") + " * " +
           ((matrices_.axes & 2) ? "kv_stage_wp(a)" : "1") + " + " + ((shape & dsl::kAxisQ) ? "q" : "0") +
           ") * kv_matrix_size(a)";
  }
  std::string matrix_out(int i) const {
    return "kv_matrix_out(a, " + std::to_string(stages_.size()) + ", " + std::to_string(matrices_.axes) + ", " +
           std::to_string(matrix_of_.at(i)) + ") + " + matrix_slot(i);
  }

  void emit_function(int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    if (is_float_var(i)) emit_var_about(i);
    line("KVEVICT_FN float " + fn(i) + "(" + kParams + ") {", here);
    w_.indent();
    line("(void)a; (void)h; (void)q; (void)c; (void)e; (void)mc; (void)s; (void)t;", here);
    if (n.op == NodeOp::Inverse) {
      line("return kv_load(a.scratch, " + matrix_out(i) + " + (long long)c * a.head_dim + e, " + matrix_extent() +
               ", 0.0f);  // factorised by stage " + std::to_string(stage_of_.at(i)), here);
    } else if ((n.op == NodeOp::Reduce || n.op == NodeOp::Sort) && is_staged(n)) {
      line("return " + slot(i) + ";  // computed by stage " + std::to_string(stage_of_.at(i)), here);
    } else if (n.op == NodeOp::Normalise && is_staged(n)) {
      // The stage stores 1 / sum over t (0 for a zero sum), exactly as the interpreter rounds it.
      line("return " + fn(n.a) + kArgs + " * " + slot(i) + ";", here);
    } else if (n.op == NodeOp::Normalise) {
      emit_inline_normalise(i);
    } else if (n.op == NodeOp::Reduce && (n.axes & dsl::kAxisT)) {
      emit_token_reduce(i, false);
    } else if (n.op == NodeOp::Reduce) {
      emit_reduce(i);
    } else if (n.op == NodeOp::Sort) {
      emit_sort(i);
    } else if (n.op == NodeOp::Window) {
      emit_window(i);
    } else if (n.op == NodeOp::Rename) {
      emit_rename(i);
    } else {
      emit_inline(i);
    }
    w_.dedent();
    line("}", here);
  }

  // Elementwise closure of node i as locals in operand order; boundary nodes are calls. Each
  // local is attributed to its own expression's line in the policy file.
  //
  // MEAN AND VARIANCE SHARED: a variance whose mean the closure also takes (the same reduction
  // of the same operand) calls its second pass with that mean (emit_var_about), so the operand is
  // read twice instead of three times. The mean is then emitted first whatever its node number.
  void emit_inline(int i) {
    const std::vector<int> closure = inline_closure(i);
    std::map<int, int> mean_of;  // variance node -> the mean node it shares
    for (int j : closure)
      for (int k : closure)
        if (j != i && k != i && is_float_var(j) && is_float_mean(k) && p_.nodes[k].a == p_.nodes[j].a &&
            p_.nodes[k].axes == p_.nodes[j].axes)
          mean_of.emplace(j, k);
    std::set<int> emitted;
    for (int j : closure) {
      if (const auto shared = mean_of.find(j); shared != mean_of.end()) {
        if (emitted.insert(shared->second).second) emit_local(i, shared->second);
        line("const float " + var(j) + " = " + var_about(j) + "(a, h, q, c, e, mc, s, t, " + var(shared->second) + ");", at(j));
        emitted.insert(j);
        continue;
      }
      if (emitted.insert(j).second) emit_local(i, j);
    }
    line("return " + var(i) + ";", at(i));
  }
  bool is_float_mean(int k) const {
    const Node& n = p_.nodes[k];
    return n.op == NodeOp::Reduce && n.reducer == Reducer::Mean && !(n.axes & dsl::kAxisT) && !is_staged(n);
  }

  // The local of node j in node i's function: a call for a boundary node, else its operation.
  void emit_local(int i, int j) {
    const Node& n = p_.nodes[j];
    std::string value;
    if (j != i && is_boundary(n)) {
      value = fn(j) + kArgs;
    } else {
      switch (n.op) {
        case NodeOp::Const: value = cuda_float_literal(n.value); break;
        case NodeOp::Scalar:
          value = cuda_scalar(n.scalar);
          if (kvevict::kScalarSignalTable[int(n.scalar)].layer_only && !p_.layer_context) value.clear();
          if (value.empty()) fail(j, "the budget signal exists only in layer_weight programs");
          break;
        case NodeOp::Load: value = cuda_load(n.tensor); break;
        case NodeOp::AxisIndex: {
          const int axis = kvevict::axis_index(n.axes);
          value = axis > 0 ? std::string("(float)") + kAxisVar[axis] : "";
          if (axis == kvevict::kAxisIndexG && p_.layer_context) value = "(float)a.kv_head";  // head g's arguments
          if (value.empty()) fail(j, "index of axis " + dsl::shape_name(n.axes) + " in a score program");
          break;
        }
        case NodeOp::Random: value = "kv_random(a, t)"; break;
        case NodeOp::Randn:  // core/engine/gaussian_rng.h, pasted into the prelude
          value = "kv_dsl_randn(a.seed, (unsigned)a.layer, (unsigned)a.kv_head, (unsigned)c, (unsigned)e)";
          break;
        case NodeOp::Table:
          if (n.lo < 0 || n.lo >= int(p_.tables.size())) fail(j, "a read of a table the program does not have");
          if (p_.tables[n.lo]->values.size() > dsl::kMaxBakedTableElements)
            fail(j, "table '" + p_.tables[n.lo]->name + "' holds " + std::to_string(p_.tables[n.lo]->values.size()) +
                        " numbers; the CUDA generator bakes at most " + std::to_string(dsl::kMaxBakedTableElements) +
                        " into a kernel (the interpreter reads it)");
          value = cuda_table_read(n.lo, *p_.tables[n.lo], n.a >= 0 ? var(n.a) : "0.0f");
          break;
        case NodeOp::Unary: value = cuda_unary(n.unary, var(n.a)); break;
        case NodeOp::Binary: value = cuda_binary(n.binary, var(n.a), var(n.b)); break;
        case NodeOp::Select: value = "(" + var(n.a) + " != 0.0f ? " + var(n.b) + " : " + var(n.c) + ")"; break;
        default: fail(j, "unexpected node in an elementwise closure");
      }
      if (value.empty()) fail(j, "unknown operation");
    }
    line("const float " + var(j) + " = " + value + ";", at(j));
  }

  // The operand of reduction i called at the loop indices r<axis> of the reduced axes and the
  // function's own indices for the others.
  std::string reduced_call(int i) const {
    const Node& n = p_.nodes[i];
    std::string args = (n.axes & dsl::kAxisG) ? "(kv_head_args(a, rg)" : "(a";
    for (int k = 1; k < dsl::kNumAxes; ++k) args += std::string(", ") + ((n.axes & (1u << k)) ? "r" : "") + kAxisVar[k];
    return fn(n.a) + args + ")";
  }
  // The loop order of reduction i (lowered.h, REDUCTION ORDER and TOKEN PAIRS): the reduced axes
  // in canonical order, except that s comes first when the operand is a token pair.
  std::vector<int> reduced_order(int i) const {
    const Node& n = p_.nodes[i];
    std::vector<int> order;
    const bool s_first = (n.axes & dsl::kAxisS) && dsl::is_token_pair(p_.nodes[n.a].shape);
    if (s_first) order.push_back(kvevict::kAxisIndexS);
    for (int k = 0; k < dsl::kNumAxes; ++k)
      if ((n.axes & (1u << k)) && !(s_first && k == kvevict::kAxisIndexS)) order.push_back(k);
    return order;
  }
  std::string reduced_count(int i) const {
    std::string count = "(1";
    for (int k = 0; k < dsl::kNumAxes; ++k)
      if (p_.nodes[i].axes & (1u << k)) count += std::string(" * (double)") + kAxisExtent[k];
    return count + ")";
  }
  // Nested loops over the reduced axes of node i, `type x` = the operand inside, then `body`.
  // lanes: the t loop is split over the block's lanes (stages).
  void reduce_loops(int i, const std::string& type, const std::string& body, bool lanes) {
    reduce_loops_over(i, type, reduced_call(i), body, lanes);
  }
  // The same with the operand spelled `operand` (a row reduction's unchecked element).
  void reduce_loops_over(int i, const std::string& type, const std::string& operand, const std::string& body,
                         bool lanes) {
    const SourceLocation here = at(i);
    const std::vector<int> order = reduced_order(i);
    for (int k : order) {
      const std::string v = std::string("r") + kAxisVar[k];
      if (lanes && k == kvevict::kAxisIndexT) line("for (int rt = lane; rt < a.T; rt += lanes) {", here);
      else line("for (int " + v + " = 0; " + v + " < " + kAxisExtent[k] + "; ++" + v + ") {", here);
      w_.indent();
    }
    line("const " + type + " x = (" + type + ")" + operand + ";", here);
    line(body, here);
    for (size_t k = 0; k < order.size(); ++k) {
      w_.dedent();
      line("}", here);
    }
  }

  // A ROW REDUCTION: reduction i runs over one axis of a signal read directly (its operand is a
  // Load), so the elements it adds are one strided row of the buffer. When the whole row lies
  // inside the buffer (checked once, before the loop), the loop reads it through a pointer with
  // no per-element bound check and no per-element index arithmetic: the hand-written kernels'
  // form, which NVRTC keeps to a load, an add and a pointer step per element where the checked
  // form costs about ten instructions (docs/JIT.md, "Speed of the generated kernels"). Otherwise
  // the checked loop runs, so the values, their order and the bounds guarantee are the same.
  bool is_row_reduction(int i) const {
    const Node& n = p_.nodes[i];
    if (n.op != NodeOp::Reduce || (n.axes & dsl::kAxisT) || std::popcount(n.axes) != 1) return false;
    const Node& operand = p_.nodes[n.a];
    return operand.op == NodeOp::Load && !cuda_load_row(operand.tensor, n.axes).pointer.empty();
  }
  // Emits `emit(operand)` (code ending in a return) for the row's unchecked element inside the
  // row's check, then for the checked call after it; without a row, the checked form only.
  template <class Emit>
  void with_row(int i, Emit emit) {
    if (!is_row_reduction(i)) return emit(reduced_call(i));
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    const CudaLoadRow row = cuda_load_row(p_.nodes[n.a].tensor, n.axes);
    const int k = kvevict::axis_index(n.axes);
    line("const float* row_ = " + row.pointer + ";", here);
    line("const long long base_ = " + row.base + ", stride_ = " + row.stride + ", n_ = " + row.extent + ";", here);
    line("const long long m_ = " + std::string(kAxisExtent[k]) + ";", here);
    // No product here can overflow: m_ < 2^31 (an int extent), stride_ <= n_ <= 2^32, so the last
    // index is below 2^63. A larger buffer (over 2^32 elements) takes the checked loop.
    line("if (row_ && (m_ <= 0 || (base_ >= 0 && base_ < n_ && n_ <= 4294967296LL && stride_ > 0 && stride_ <= n_ &&",
         here);
    line("                         base_ + (m_ - 1) * stride_ < n_))) {", here);
    w_.indent();
    emit("row_[base_ + (long long)r" + std::string(kAxisVar[k]) + " * stride_]");
    w_.dedent();
    line("}", here);
    emit(reduced_call(i));
  }

  // Reduction over axes other than t: float accumulation in the interpreter's order.
  void emit_reduce(int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    if ((n.axes & dsl::kAxisG) && !p_.layer_context) fail(i, "a reduction over g in a score program");
    switch (n.reducer) {
      case Reducer::Sum:
      case Reducer::Mean:
      case Reducer::Var:
        line("const int count = (int)" + reduced_count(i) + ";", here);
        line("(void)count;", here);
        return with_row(i, [&](const std::string& x) {
          line("{", here);
          w_.indent();
          line("float s_ = 0.0f;", here);
          reduce_loops_over(i, "float", x, "s_ += x;", false);
          if (n.reducer == Reducer::Sum) line("return s_;", here);
          else if (n.reducer == Reducer::Mean) line("return s_ * (1.0f / (float)count);", here);
          else line("return " + var_about(i) + "(a, h, q, c, e, mc, s, t, s_ * (1.0f / (float)count));", here);
          w_.dedent();
          line("}", here);
        });
      case Reducer::Max:
      case Reducer::Min:
        return with_row(i, [&](const std::string& x) {
          line("{", here);
          w_.indent();
          line("float m = 0.0f;", here);
          line("bool first = true;", here);
          reduce_loops_over(i, "float", x, std::string("if (first) { m = x; first = false; } else { m = ") +
                                               (n.reducer == Reducer::Max ? "x > m" : "x < m") + " ? x : m; }", false);
          line("return m;", here);
          w_.dedent();
          line("}", here);
        });
      case Reducer::Entropy:
        return with_row(i, [&](const std::string& x) {
          line("{", here);
          w_.indent();
          line("float s_ = 0.0f;", here);
          reduce_loops_over(i, "float", x, "s_ -= x > 0.0f ? x * logf(x) : 0.0f;", false);
          line("return s_;", here);
          w_.dedent();
          line("}", here);
        });
    }
  }

  // A variance's second pass given its mean: <fn>_about(indices..., mean), emitted before the
  // variance's own function. The mean is the first pass's exact float (s_ times the reciprocal of
  // the count), so a caller that already holds the same reduction's mean (MEAN AND VARIANCE
  // SHARED, emit_inline) passes it and skips the first pass with the same bits.
  std::string var_about(int i) const { return fn(i) + "_about"; }
  void emit_var_about(int i) {
    const SourceLocation here = at(i);
    line("KVEVICT_FN float " + var_about(i) + "(" + kParams + ", float mean) {", here);
    w_.indent();
    line("(void)a; (void)h; (void)q; (void)c; (void)e; (void)mc; (void)s; (void)t;", here);
    line("const int count = (int)" + reduced_count(i) + ";", here);
    with_row(i, [&](const std::string& x) {
      line("{", here);
      w_.indent();
      line("float s2 = 0.0f;", here);
      reduce_loops_over(i, "float", x, "const float d_ = x - mean; s2 += d_ * d_;", false);
      line("return s2 * (count > 1 ? 1.0f / (float)(count - 1) : 0.0f);", here);
      w_.dedent();
      line("}", here);
    });
    w_.dedent();
    line("}", here);
  }
  // The float variance reductions emit_reduce generates (not staged, not over t).
  bool is_float_var(int j) const {
    const Node& n = p_.nodes[j];
    return n.op == NodeOp::Reduce && n.reducer == Reducer::Var && !(n.axes & dsl::kAxisT) && !is_staged(n);
  }

  // Reduction i over t (and other axes) in double, like the interpreter's: emits the accumulation
  // and returns the float result expression. lanes: split t over the block's lanes and combine
  // (stages); otherwise one thread does all (a reduction over t that keeps s or e).
  std::string double_reduction(int i, Reducer r, bool lanes) {
    const SourceLocation here = at(i);
    auto combine = [&](const std::string& v, int how) {
      if (lanes) combine_lanes(v, how, here);
    };
    line("const double count = " + reduced_count(i) + ";", here);
    line("(void)count;", here);
    switch (r) {
      case Reducer::Sum:
      case Reducer::Mean:
      case Reducer::Var: {
        line("double s_ = 0.0;", here);
        reduce_loops(i, "double", "s_ += x;", lanes);
        combine("s_", 0);
        if (r == Reducer::Sum) return "(float)s_";
        line("const double mean = count > 0.0 ? s_ / count : 0.0;", here);
        if (r == Reducer::Mean) return "(float)mean";
        line("double s2 = 0.0;", here);
        reduce_loops(i, "double", "s2 += (x - mean) * (x - mean);", lanes);
        combine("s2", 0);
        return "count > 1.0 ? (float)(s2 / (count - 1.0)) : 0.0f";
      }
      case Reducer::Max:
      case Reducer::Min: {
        const bool is_max = r == Reducer::Max;
        line(std::string("double m = ") + (is_max ? "-" : "") + "(double)KVEVICT_INFINITY;", here);
        reduce_loops(i, "double", std::string("m = ") + (is_max ? "x > m" : "x < m") + " ? x : m;", lanes);
        combine("m", is_max ? 1 : 2);
        return "count > 0.0 ? (float)m : 0.0f  /* an empty reduction is 0 */";
      }
      case Reducer::Entropy:
        line("double s_ = 0.0;", here);
        reduce_loops(i, "double", "s_ -= x > 0.0 ? x * log(x) : 0.0;", lanes);
        combine("s_", 0);
        return "(float)s_";
    }
    return "0.0f";
  }

  void emit_token_reduce(int i, bool) {
    if ((p_.nodes[i].axes & dsl::kAxisG) && !p_.layer_context) fail(i, "a reduction over g in a score program");
    const std::string result = double_reduction(i, p_.nodes[i].reducer, false);
    line("return " + result + ";", at(i));
  }

  // normalise() of a value over s or e (not staged): the sum over t inside the thread, rounded as
  // the interpreter rounds it.
  void emit_inline_normalise(int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    line("double sum = 0.0;", here);
    line("for (int rt = 0; rt < a.T; ++rt) sum += (double)" + fn(n.a) + "(a, h, q, c, e, mc, s, rt);", here);
    line("const float inv = sum != 0.0 ? (float)(1.0 / sum) : 0.0f;", here);
    line("return " + fn(n.a) + kArgs + " * inv;", here);
  }

  // A read with renamed axes (K[d, s]): the operand at the renamed indices.
  void emit_rename(int i) {
    const Node& n = p_.nodes[i];
    const unsigned shape = p_.nodes[n.a].shape;
    std::string args = "(a";
    for (int k = 1; k < dsl::kNumAxes; ++k)
      args += std::string(", ") + kAxisVar[(shape & (1u << k)) ? dsl::rename_target(n, k) : k];
    if ((shape & dsl::kAxisG) && !p_.layer_context) fail(i, "axis g in a score program");
    line("return " + fn(n.a) + args + ");", at(i));
  }

  // Window over token offsets lo..hi with the padding rule of lowered.h. The loop runs over the
  // tokens u = t + k that exist, [max(t + lo, 0), min(t + hi, T - 1)] in 64-bit arithmetic, so
  // the operand is only ever called at a token inside [0, T), whatever lo and hi are.
  void emit_window(int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    if (n.lo > n.hi) fail(i, "a token window with lo > hi");
    const std::string lo = std::to_string(n.lo) + "LL", hi = std::to_string(n.hi) + "LL";
    const std::string call = fn(n.a) + "(a, h, q, c, e, mc, s, (int)u)";
    auto range = [&] {
      line("const long long first = (long long)t + " + lo + " > 0 ? (long long)t + " + lo + " : 0;", here);
      line("const long long last = (long long)t + " + hi + " < (long long)a.T - 1 ? (long long)t + " + hi +
               " : (long long)a.T - 1;", here);
    };
    switch (n.reducer) {
      case Reducer::Sum:
      case Reducer::Mean: {
        const long long width = static_cast<long long>(n.hi) - n.lo + 1;
        line("float s_ = 0.0f;", here);
        range();
        line("for (long long u = first; u <= last; ++u) s_ += " + call + ";", here);
        return line(n.reducer == Reducer::Sum ? "return s_;" : "return s_ * (1.0f / (float)" + std::to_string(width) + "LL);", here);
      }
      case Reducer::Max:
      case Reducer::Min: {
        const bool is_max = n.reducer == Reducer::Max;
        range();
        line("if (first > last) return 0.0f;  // no offset in range", here);
        line(std::string("float m = ") + (is_max ? "-" : "") + "KVEVICT_INFINITY;", here);
        line("for (long long u = first; u <= last; ++u) {", here);
        w_.indent();
        line("const float x = " + call + ";", here);
        line(std::string("m = ") + (is_max ? "x > m" : "x < m") + " ? x : m;", here);
        w_.dedent();
        line("}", here);
        return line("return m;", here);
      }
      default: fail(i, "a token window supports sum, mean, max and min only");
    }
  }

  // The operand of sort node i with its sorted axis at the loop variable v (the others: the
  // function's own indices).
  std::string operand_at(int i, const std::string& v) const {
    const Node& n = p_.nodes[i];
    std::string args = "(a";
    for (int k = 1; k < dsl::kNumAxes; ++k) args += std::string(", ") + ((n.axes & (1u << k)) ? v : kAxisVar[k]);
    return fn(n.a) + args + ")";
  }
  // rank / sorted_cumsum along one axis (dsl/sort_ops.h): a loop over the axis inside the thread,
  // O(n) per element. The cumulative sum adds in index order (the interpreter in rank order; both
  // in double, rounded once: within one ulp).
  void emit_sort(int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    const int k = kvevict::axis_index(n.axes);
    if (k <= 0) fail(i, "a sort along g is not generated (the interpreter computes it)");
    if (n.sort == dsl::SortFn::Quantile) return line("return " + quantile_body(i, false) + ";", here);
    const std::string self = kAxisVar[k];
    line("const float xi = " + fn(n.a) + kArgs + ";", here);
    line("double acc = 0.0;", here);
    line("for (int rs = 0; rs < " + std::string(kAxisExtent[k]) + "; ++rs) {", here);
    w_.indent();
    line("const float x = " + operand_at(i, "rs") + ";", here);
    line(std::string("if (kv_sort_before(x, rs, xi, ") + self + ")) acc += " +
             (n.sort == dsl::SortFn::Rank ? "1.0" : "(double)x") + ";", here);
    w_.dedent();
    line("}", here);
    line("return (float)acc;", here);
  }
  // quantile along one axis with linear interpolation (dsl/sort_ops.h): the values of ascending
  // rank lo and hi found by counting, O(n^2); lanes: the candidates split over the block's lanes
  // (a stage over t), combined by max (one candidate has each rank) and the NaN count by sum.
  // Emits the loops and returns the result expression.
  std::string quantile_body(int i, bool lanes) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    const int k = kvevict::axis_index(n.axes);
    const std::string extent = kAxisExtent[k];
    line("const float level = " + fn(n.b) + (lanes ? "(a, h, q, c, e, mc, s, 0)" : kArgs) + ";  // a scalar", here);
    line("const long long n_ = " + extent + ";", here);
    line("const double p_ = level < 0.0f ? 0.0 : level > 1.0f ? 1.0 : (double)level;", here);
    line("const double pos = p_ * (double)(n_ > 0 ? n_ - 1 : 0);", here);
    line("const long long lo = (long long)floor(pos), hi = lo + 1 < n_ ? lo + 1 : n_ - 1;", here);
    line("double vlo = -(double)KVEVICT_INFINITY, vhi = -(double)KVEVICT_INFINITY, nans = 0.0;", here);
    line(std::string("for (int rs = ") + (lanes ? "lane" : "0") + "; rs < n_; rs += " + (lanes ? "lanes" : "1") + ") {", here);
    w_.indent();
    line("const float x = " + operand_at(i, "rs") + ";", here);
    line("if (x != x) { nans += 1.0; continue; }", here);
    line("long long below = 0;", here);
    line("for (int ru = 0; ru < n_; ++ru) {", here);
    w_.indent();
    line("const float y = " + operand_at(i, "ru") + ";", here);
    line("if (y < x || (y == x && ru < rs)) ++below;", here);
    w_.dedent();
    line("}", here);
    line("if (below == lo) vlo = (double)x;", here);
    line("if (below == hi) vhi = (double)x;", here);
    w_.dedent();
    line("}", here);
    if (lanes) {
      line("vlo = kv_block_combine(vlo, 1);", here);
      line("vhi = kv_block_combine(vhi, 1);", here);
      line("nans = kv_block_combine(nans, 0);", here);
    }
    return "(n_ == 0 ? 0.0f : (nans > 0.0 || level != level) ? (0.0f / 0.0f) : (float)(vlo + (pos - (double)lo) * (vhi - vlo)))";
  }

  // Stage s computes staged node i at the slot (h, q, c). Like the interpreter's reductions over
  // t: double accumulation over the operand in canonical order (s first for a token pair); each
  // lane takes the tokens t = lane, lane + lanes, ... and kv_block_combine adds the lanes (on the
  // host there is one lane, so the order is exactly the interpreter's).
  // A SPLIT STAGE (kernel_abi.h, "Split stages"): a staged reduction or normalise whose value has
  // no axis h, q or d, so that it has one slot per KV head and would run on one block; its tokens
  // are spread over the parts instead. Quantiles (candidates counted against every element) and
  // matrix stages are not split.
  bool is_split(int i) const {
    const Node& n = p_.nodes[i];
    if (!is_staged(n) || n.op == NodeOp::Inverse || n.op == NodeOp::Sort) return false;
    return !(n.shape & (dsl::kAxisH | dsl::kAxisQ | dsl::kAxisD));
  }
  // The split area's cell of step `step` (kernel_abi.h) for this head (g in a layer program).
  std::string split_cell(int step) const {
    return "kv_split_cell(a, " + layout_args() + ", " + std::to_string(step) + ", " + (p_.layer_context ? "a.kv_head" : "0") + ")";
  }

  // Stage s computes staged node i at the slot (h, q, c) (a split stage: its part, below).
  void emit_stage(int s, int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    if (n.op == NodeOp::Inverse) return emit_matrix_stage(s, i);
    const bool is_normalise = n.op == NodeOp::Normalise;
    if (!is_normalise && (n.axes & dsl::kAxisG) && !p_.layer_context) fail(i, "a reduction over g in a score program");
    const bool has_h = n.shape & dsl::kAxisH, has_q = n.shape & dsl::kAxisQ, has_d = n.shape & dsl::kAxisD;
    split_ = is_split(i);
    // Slots outside the value's shape are never read (block-uniform: every lane returns). In a
    // layer program a value without g lives at head 0's slots (a is head g's arguments).
    const std::string g_outside = p_.layer_context && !(n.shape & dsl::kAxisG) ? " || a.kv_head != 0" : "";
    if (split_) {  // the block's slot index is its part; the value's own h, q and c are 0
      line("KVEVICT_FN void " + stage_name(s) + "(const KvScoreArgs& a, int slot_h, int slot_q, int slot_c) {", here);
      w_.indent();
      line("const long long part_ = ((long long)slot_h * kv_stage_wp(a) + slot_q) * kv_stage_cp(a) + slot_c;", here);
      line("const int parts_ = kv_stage_parts(a);", here);
      line("double* const cell_ = " + split_cell(s) + ";", here);
      line("if (part_ >= parts_ || !cell_" + g_outside + ") return;", here);
      line("const int lane = (int)part_ * KVEVICT_LANES + KVEVICT_LANE, lanes = parts_ * KVEVICT_LANES;", here);
      line("const int h = 0, q = 0, c = 0;", here);
      line("(void)h; (void)q; (void)c;", here);
    } else {
      line("KVEVICT_FN void " + stage_name(s) + "(const KvScoreArgs& a, int h, int q, int c) {", here);
      w_.indent();
      line(std::string("if (") + (has_h ? "false" : "h != 0") + " || " + (has_q ? "q >= a.W" : "q != 0") + " || " +
               (has_d ? "c >= a.head_dim" : "c != 0") + g_outside + ") return;", here);
      line("const int lane = KVEVICT_LANE, lanes = KVEVICT_LANES;", here);
    }
    line("const int e = 0, mc = 0, s = 0;  // a staged value has neither e, c nor s", here);
    line("(void)e; (void)mc; (void)s;", here);
    std::string result;
    if (n.op == NodeOp::Sort) {
      result = quantile_body(i, true);
    } else if (is_normalise) {
      line("double s_ = 0.0;", here);
      line("for (int rt = lane; rt < a.T; rt += lanes) s_ += (double)" + fn(n.a) + "(a, h, q, c, e, mc, s, rt);", here);
      combine_lanes("s_", 0, here);
      result = "s_ != 0.0 ? (float)(1.0 / s_) : 0.0f";
    } else if (split_ && n.reducer == Reducer::Var) {
      result = split_variance(s, i);
    } else {
      result = double_reduction(i, n.reducer, true);
    }
    if (!result.empty())
      line("if (KVEVICT_LANE == 0) kv_store(a.scratch, " + slot_index(i) + ", " + scratch_extent() + ", " + result + ");", here);
    split_ = false;
    w_.dedent();
    line("}", here);
  }

  // The block's lanes combined (a stage), then in a split stage the parts: every block but the
  // last stops here.
  void combine_lanes(const std::string& v, int how, const SourceLocation& here) {
    line(v + " = kv_block_combine(" + v + ", " + std::to_string(how) + ");", here);
    if (split_) line("if (!kv_parts_combine(cell_, (int)part_, parts_, " + v + ", " + std::to_string(how) + ")) return;", here);
  }

  // A split variance in two steps, as double_reduction's two passes: step stage_of_(i) - 1 adds
  // the operand and carries the mean in its cell; step stage_of_(i) adds the squares about it.
  // Returns the result expression in the second step, "" in the first (which stores no slot).
  std::string split_variance(int s, int i) {
    const SourceLocation here = at(i);
    const bool first = s != stage_of_.at(i);
    line("const double count = " + reduced_count(i) + ";", here);
    if (first) {
      line("double s_ = 0.0;", here);
      reduce_loops(i, "double", "s_ += x;", true);
      combine_lanes("s_", 0, here);
      line("if (KVEVICT_LANE == 0) cell_[KVEVICT_MAX_STAGE_PARTS] = count > 0.0 ? s_ / count : 0.0;  // the mean", here);
      return "";
    }
    line("const double mean = " + split_cell(s - 1) + "[KVEVICT_MAX_STAGE_PARTS];  // carried by step " +
             std::to_string(s - 1), here);
    line("double s2 = 0.0;", here);
    reduce_loops(i, "double", "s2 += (x - mean) * (x - mean);", true);
    combine_lanes("s2", 0, here);
    return "count > 1.0 ? (float)(s2 / (count - 1.0)) : 0.0f";
  }

  // Stage s factorises inverse() node i for the slot (h, q, c = 0): the block's lanes fill the
  // operand matrix M[d, e] (each entry one call of the operand's function, whose own loops are
  // the interpreter's), then lane 0 runs kv_spd_inverse (dsl/matrix_ops.h), the interpreter's
  // macro text, into the matrix's output slot. One thread factorises because the macro's fixed
  // order of double operations is what makes the host kernel equal to the interpreter bit for
  // bit; the factorisation (head_dim^3 / 2 multiply-adds, once per head) is cheap next to filling
  // M, which is what the lanes share. head_dim outside 1 .. kMaxMatrixDim: nothing is written
  // (the runners refuse it before allocating the scratch).
  void emit_matrix_stage(int s, int i) {
    const Node& n = p_.nodes[i];
    const SourceLocation here = at(i);
    const bool has_h = n.shape & dsl::kAxisH, has_q = n.shape & dsl::kAxisQ;
    line("KVEVICT_FN void " + stage_name(s) + "(const KvScoreArgs& a, int h, int q, int c) {", here);
    w_.indent();
    line(std::string("if (") + (has_h ? "false" : "h != 0") + " || " + (has_q ? "q >= a.W" : "q != 0") + " || c != 0) return;",
         here);
    line("const int lane = KVEVICT_LANE, lanes = KVEVICT_LANES, n = a.head_dim;", here);
    line("const long long extent = " + matrix_extent() + ", slot = " + matrix_slot(i) + ";", here);
    line("const long long out = " + matrix_out(i) + ";", here);
    line("const long long m = kv_matrix_operand(a, " + layout_args() + ") + slot;", here);
    line("const long long work = kv_matrix_work(a, " + layout_args() + ") + 2 * slot;", here);
    line("if (!a.scratch || n < 1 || n > KVEVICT_MAX_MATRIX_DIM || work + 2 * kv_matrix_size(a) > extent) return;", here);
    line("for (long long k = lane; k < (long long)n * n; k += lanes)", here);
    line("  kv_store(a.scratch, m + k, extent, " + fn(n.a) + "(a, h, q, (int)(k / n), (int)(k % n), 0, 0, 0));", here);
    line("KVEVICT_SYNC();  // M complete before the factorisation reads it", here);
    line("if (lane == 0) kv_spd_inverse(a.scratch + m, n, (double*)(a.scratch + work), a.scratch + out);", here);
    w_.dedent();
    line("}", here);
  }

  CudaWriter& w_;
  const LoweredProgram& p_;
  std::string prefix_, file_;
  SourceLocation where_;
  KernelOutput output_;
  std::vector<int> stages_;      // staged node indices, in stage order (a split variance twice: kernel_abi.h)
  bool split_ = false;           // emitting a split stage (is_split): lanes span the parts
  std::map<int, int> stage_of_;  // staged node -> its stage
  std::map<int, int> matrix_of_;  // inverse() node -> its matrix (0 .. matrices_.count - 1)
  MatrixScratch matrices_;
};

}  // namespace

EmittedProgram emit_score_program(CudaWriter& writer, const dsl::LoweredProgram& program, const std::string& prefix,
                                  const std::string& policy_file, const SourceLocation& where, KernelOutput output) {
  return ProgramEmitter(writer, program, prefix, policy_file, where, output).emit();
}

SourceLocation find_policy_key_in_text(const std::string& policy_file, const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number)
    if (line.compare(0, key.size() + 1, key + ":") == 0) return {policy_file, number};
  return {};
}

SourceLocation find_policy_key(const std::string& policy_file, const std::string& key) {
  std::ifstream in(policy_file);
  std::stringstream text;
  text << in.rdbuf();
  return find_policy_key_in_text(policy_file, text.str(), key);
}

GeneratedKernel generate_score_kernels(const std::string& name, const std::string& policy_file,
                                       const dsl::LoweredProgram& score, const dsl::LoweredProgram* decode,
                                       const SourceLocation& score_at, const SourceLocation& decode_at,
                                       const dsl::LoweredProgram* channel, const SourceLocation& channel_at,
                                       const dsl::LoweredProgram* layer, const SourceLocation& layer_at) {
  GeneratedKernel kernel;
  kernel.name = name;
  kernel.policy_file = policy_file;
  CudaWriter writer(name);
  writer.block("// Generated by kvevict from " + policy_file + "; do not edit.\n");
  writer.block(kernel_prelude());
  // A staged program gets the staged entry (NAME and NAME_stages); others keep the plain one.
  auto entry = [&writer](const std::string& entry_name, const EmittedProgram& p) {
    const KernelOutputInfo& kind = kernel_output_info(p.output);
    if (p.stage_count == 0) return writer.line(std::string(kind.entry) + "(" + entry_name + ", " + p.element_function + ")");
    writer.line(std::string(kind.staged_entry) + "(" + entry_name + ", " + p.element_function + ", " + p.stage_function +
                ", " + std::to_string(p.stage_count) + ", " + std::to_string(p.matrices.count) + ", " +
                std::to_string(p.matrices.axes) + ")");
  };
  const bool has_decode = decode && !decode->nodes.empty(), has_channel = channel && channel->output >= 0;
  // Tables are constants of the policy, baked into the text (not a kernel argument): they are
  // small (dsl/table_data.h caps them), the kernel cache keys on the text so a new table file is a
  // new kernel, and the kernel ABI and the GPU uploads stay as they are. Every program of a policy
  // shares the policy's table list, so one definition per table serves all of its programs.
  std::set<int> tables_read;
  for (const dsl::LoweredProgram* p : {&score, has_decode ? decode : nullptr, has_channel ? channel : nullptr, layer})
    if (p)
      for (const dsl::Node& n : p->nodes)
        if (n.op == NodeOp::Table && n.lo >= 0 && n.lo < int(p->tables.size())) tables_read.insert(n.lo);
  for (int t : tables_read) writer.block(cuda_table_definition(t, *score.tables.at(size_t(t))));
  const EmittedProgram score_program = emit_score_program(writer, score, "score", policy_file, score_at);
  entry(kScoreEntry, score_program);
  kernel.entry_points.push_back(kScoreEntry);
  kernel.score_stages = score_program.stage_count;
  kernel.score_matrices = score_program.matrices;
  kernel.score_signals = score.uses;
  if (has_decode) {
    const EmittedProgram decode_program = emit_score_program(writer, *decode, "decode", policy_file, decode_at);
    entry(kDecodeScoreEntry, decode_program);
    kernel.entry_points.push_back(kDecodeScoreEntry);
    kernel.decode_stages = decode_program.stage_count;
    kernel.decode_matrices = decode_program.matrices;
    kernel.decode_signals = decode->uses;
  }
  if (layer && layer->output >= 0) {  // layer_weight: one value per layer from every KV head (KernelOutput::Layer)
    const EmittedProgram layer_program = emit_score_program(writer, *layer, "layer_weight", policy_file, layer_at, KernelOutput::Layer);
    entry(kLayerWeightEntry, layer_program);
    kernel.entry_points.push_back(kLayerWeightEntry);
    kernel.layer_stages = layer_program.stage_count;
    kernel.layer_signals = layer->uses;
  }
  if (has_channel) {  // channel_score[d]: one thread per key channel (KernelOutput::Channel)
    const EmittedProgram channel_program =
        emit_score_program(writer, *channel, "channel_score", policy_file, channel_at, KernelOutput::Channel);
    entry(kChannelScoreEntry, channel_program);
    kernel.entry_points.push_back(kChannelScoreEntry);
    kernel.channel_stages = channel_program.stage_count;
    kernel.channel_matrices = channel_program.matrices;
    kernel.channel_signals = channel->uses;
  }
  kernel.source = writer.text();
  return kernel;
}

}  // namespace kvevict::jit
#endif  // KVEVICT_HAVE_LOWERED_FORM
