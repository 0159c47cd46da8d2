#pragma once
// The CUDA generator's emitter of one lowered program (scheme and limits: cuda_codegen.h). Internal
// to jit/: cuda_codegen.cpp holds the element functions, cuda_reduce_codegen.cpp the reductions
// and cuda_stage_codegen.cpp the stages (split and matrix stages included).
#include <map>
#include <string>
#include <vector>

#include "dsl/lowered.h"
#include "jit/cuda_codegen.h"
#include "jit/cuda_writer.h"
#include "jit/kernel_abi.h"

namespace kvevict::jit::detail {

using dsl::LoweredProgram;
using dsl::Node;
using dsl::NodeOp;
using dsl::Reducer;

// A node whose value at (h, q, t) is not a function of its operands at the same indices: calls
// to it stop the inlining of elementwise operands.
inline bool is_boundary(const Node& n) {
  return n.op == NodeOp::Reduce || n.op == NodeOp::Window || n.op == NodeOp::Normalise || n.op == NodeOp::Rename ||
         n.op == NodeOp::Sort || n.op == NodeOp::Inverse;
}
// A node that needs every token before any token's score: computed by a stage into scratch. The
// scratch slots cover (h, q, d); a value over s, e or c (a reduction over t that keeps s, a
// normalise of a token pair, a per-model-channel statistic) is computed by loops inside the thread
// instead (not staged). inverse() is a matrix stage (kernel_abi.h): its value depends on the whole
// d x e matrix of its operand, which does not depend on t, so it is factorised once per (h, q)
// before the tokens.
inline bool is_staged(const Node& n) {
  if (n.op == NodeOp::Inverse) return true;
  const bool token_quantile = n.op == NodeOp::Sort && n.sort == dsl::SortFn::Quantile && (n.axes & dsl::kAxisT);
  return ((n.op == NodeOp::Reduce && (n.axes & dsl::kAxisT)) || n.op == NodeOp::Normalise || token_quantile) &&
         !(n.shape & (dsl::kAxisS | dsl::kAxisE | dsl::kAxisC));
}

// The index variable of each axis in the generated functions (d is `c`, the channel; the model
// axis c is `mc`) and the extent of its loops. Axis g (layer_weight programs) is not a parameter:
// a function at KV head g takes head g's arguments (kv_head_args, kernel_abi.h), so `a.kv_head`
// is its g and a loop over g (`rg`) calls its operand with kv_head_args(a, rg).
inline constexpr const char* kAxisVar[] = {"g", "h", "q", "c", "e", "mc", "s", "t"};
inline constexpr const char* kAxisExtent[] = {"kv_layer_heads(a)", "a.group", "a.W", "a.head_dim", "a.head_dim", "a.n_embd", "a.T", "a.T"};
static_assert(sizeof(kAxisVar) / sizeof(kAxisVar[0]) == dsl::kNumAxes, "one variable per axis of KVEVICT_AXES");
static_assert(sizeof(kAxisExtent) / sizeof(kAxisExtent[0]) == dsl::kNumAxes, "one extent per axis of KVEVICT_AXES");
inline constexpr const char* kParams = "const KvScoreArgs& a, int h, int q, int c, int e, int mc, int s, int t";
inline constexpr const char* kArgs = "(a, h, q, c, e, mc, s, t)";

class ProgramEmitter {
 public:
  ProgramEmitter(CudaWriter& w, const LoweredProgram& p, std::string prefix, std::string file, SourceLocation where,
                 KernelOutput output)
      : w_(w), p_(p), prefix_(std::move(prefix)), file_(std::move(file)), where_(std::move(where)), output_(output) {}
  EmittedProgram emit();
 private:
  // Where node i came from: its own expression in the policy file when known, else the program.
  SourceLocation at(int i) const;
  [[noreturn]] void fail(int i, const std::string& what) const;
  void line(const std::string& text, const SourceLocation& where) { w_.line(text, where); }
  // The function one thread of the entry calls: the output node at output index i (the token t or
  // the key channel c; kernel_abi.h, KernelOutput), every other index 0 (the output has no other
  // axis). A score's NaN becomes -inf; a channel score's NaN is kept, as the interpreter keeps it.
  void emit_element_function(EmittedProgram& result);
  std::string fn(int i) const { return prefix_ + "_n" + std::to_string(i); }
  // Appended rather than `"v" + to_string(i)`: GCC 12 misreports that form inlined here (-Wrestrict, GCC bug 105651).
  std::string var(int i) const { return std::string("v").append(std::to_string(i)); }
  std::string stage_name(int s) const { return prefix_ + "_stage" + std::to_string(s); }
  // Nodes computed inline in node i's function: i and, through elementwise edges, its operands,
  // stopping at (and including, as calls) boundary nodes. Sorted, so operands come first.
  std::vector<int> inline_closure(int i) const;
  // The scratch index of staged node i at (g, h, q, c): its stage's block, then
  // ((g * G + h) * Wp + q) * Cp + c for the axes the value has (the others are 0; c is the
  // channel, axis d; g is a.kv_head, layer_weight programs only). Reads and writes go through the
  // prelude's bounded kv_load / kv_store against the scratch's extent, n_stages * kv_stage_slots(a).
  std::string slot_index(int i) const;
  std::string scratch_extent() const { return "(long long)" + std::to_string(stages_.size()) + " * kv_stage_slots(a)"; }
  std::string slot(int i) const { return "kv_load(a.scratch, " + slot_index(i) + ", " + scratch_extent() + ", 0.0f)"; }
  // Matrix stages (kernel_abi.h, "Matrix stages"): the arguments shared by the layout functions,
  // the whole scratch's extent, and the offset of matrix i's slot for (h, q) (its first entry).
  std::string layout_args() const;
  std::string matrix_extent() const { return "kv_scratch_floats(a, " + layout_args() + ")"; }
  std::string matrix_slot(int i) const;
  std::string matrix_out(int i) const;
  void emit_function(int i);
  // Elementwise closure of node i as locals in operand order; boundary nodes are calls. Each
  // local is attributed to its own expression's line in the policy file.
  //
  // MEAN AND VARIANCE SHARED: a variance whose mean the closure also takes (the same reduction
  // of the same operand) calls its second pass with that mean (emit_var_about), so the operand is
  // read twice instead of three times. The mean is then emitted first whatever its node number.
  void emit_inline(int i);
  bool is_float_mean(int k) const;
  // The local of node j in node i's function: a call for a boundary node, else its operation.
  void emit_local(int i, int j);
  // The operand of reduction i called at the loop indices r<axis> of the reduced axes and the
  // function's own indices for the others.
  std::string reduced_call(int i) const;
  // The loop order of reduction i (lowered.h, REDUCTION ORDER and TOKEN PAIRS): the reduced axes
  // in canonical order, except that s comes first when the operand is a token pair.
  std::vector<int> reduced_order(int i) const;
  std::string reduced_count(int i) const;
  // Nested loops over the reduced axes of node i, `type x` = the operand inside, then `body`.
  // lanes: the t loop is split over the block's lanes (stages).
  void reduce_loops(int i, const std::string& type, const std::string& body, bool lanes);
  // The same with the operand spelled `operand` (a row reduction's unchecked element).
  void reduce_loops_over(int i, const std::string& type, const std::string& operand, const std::string& body,
                         bool lanes);
  // A ROW REDUCTION: reduction i runs over one axis of a signal read directly (its operand is a
  // Load), so the elements it adds are one strided row of the buffer. When the whole row lies
  // inside the buffer (checked once, before the loop), the loop reads it through a pointer with
  // no per-element bound check and no per-element index arithmetic: the hand-written kernels'
  // form, which NVRTC keeps to a load, an add and a pointer step per element where the checked
  // form costs about ten instructions (docs/JIT.md, "Speed of the generated kernels"). Otherwise
  // the checked loop runs, so the values, their order and the bounds guarantee are the same.
  bool is_row_reduction(int i) const;
  // Emits `emit(operand)` (code ending in a return) for the row's unchecked element inside the
  // row's check, then for the checked call after it; without a row, the checked form only.
  template <class Emit>
  void with_row(int i, Emit emit);
  // Reduction over axes other than t: float accumulation in the interpreter's order.
  void emit_reduce(int i);
  // A variance's second pass given its mean: <fn>_about(indices..., mean), emitted before the
  // variance's own function. The mean is the first pass's exact float (s_ times the reciprocal of
  // the count), so a caller that already holds the same reduction's mean (MEAN AND VARIANCE
  // SHARED, emit_inline) passes it and skips the first pass with the same bits.
  std::string var_about(int i) const { return fn(i) + "_about"; }
  void emit_var_about(int i);
  // The float variance reductions emit_reduce generates (not staged, not over t).
  bool is_float_var(int j) const;
  // Reduction i over t (and other axes) in double, like the interpreter's: emits the accumulation
  // and returns the float result expression. lanes: split t over the block's lanes and combine
  // (stages); otherwise one thread does all (a reduction over t that keeps s or e).
  std::string double_reduction(int i, Reducer r, bool lanes);
  void emit_token_reduce(int i, bool);
  // normalise() of a value over s or e (not staged): the sum over t inside the thread, rounded as
  // the interpreter rounds it.
  void emit_inline_normalise(int i);
  // A read with renamed axes (K[d, s]): the operand at the renamed indices.
  void emit_rename(int i);
  // Window over token offsets lo..hi with the padding rule of lowered.h. The loop runs over the
  // tokens u = t + k that exist, [max(t + lo, 0), min(t + hi, T - 1)] in 64-bit arithmetic, so
  // the operand is only ever called at a token inside [0, T), whatever lo and hi are.
  void emit_window(int i);
  // The operand of sort node i with its sorted axis at the loop variable v (the others: the
  // function's own indices).
  std::string operand_at(int i, const std::string& v) const;
  // rank / sorted_cumsum along one axis (dsl/sort_ops.h): a loop over the axis inside the thread,
  // O(n) per element. The cumulative sum adds in index order (the interpreter in rank order; both
  // in double, rounded once: within one ulp).
  void emit_sort(int i);
  // quantile along one axis with linear interpolation (dsl/sort_ops.h): the values of ascending
  // rank lo and hi found by counting, O(n^2); lanes: the candidates split over the block's lanes
  // (a stage over t), combined by max (one candidate has each rank) and the NaN count by sum.
  // Emits the loops and returns the result expression.
  std::string quantile_body(int i, bool lanes);
  // A SPLIT STAGE (kernel_abi.h, "Split stages"): a staged reduction or normalise whose value has
  // no axis h, q or d, so that it has one slot per KV head and would run on one block; its tokens
  // are spread over the parts instead. Quantiles (candidates counted against every element) and
  // matrix stages are not split.
  bool is_split(int i) const;
  // The split area's cell of step `step` (kernel_abi.h) for this head (g in a layer program).
  std::string split_cell(int step) const;
  // Stage s computes staged node i at the slot (h, q, c) (a split stage: at its part). Like the
  // interpreter's reductions over t: double accumulation over the operand in canonical order (s
  // first for a token pair); each lane takes the tokens t = lane, lane + lanes, ... and
  // kv_block_combine adds the lanes (on the host there is one lane, so the order is exactly the
  // interpreter's).
  void emit_stage(int s, int i);
  // The block's lanes combined (a stage), then in a split stage the parts: every block but the
  // last stops here.
  void combine_lanes(const std::string& v, int how, const SourceLocation& here);
  // A split variance in two steps, as double_reduction's two passes: step stage_of_(i) - 1 adds
  // the operand and carries the mean in its cell; step stage_of_(i) adds the squares about it.
  // Returns the result expression in the second step, "" in the first (which stores no slot).
  std::string split_variance(int s, int i);
  // Stage s factorises inverse() node i for the slot (h, q, c = 0): the block's lanes fill the
  // operand matrix M[d, e] (each entry one call of the operand's function, whose own loops are
  // the interpreter's), then lane 0 runs kv_spd_inverse (dsl/matrix_ops.h), the interpreter's
  // macro text, into the matrix's output slot. One thread factorises because the macro's fixed
  // order of double operations is what makes the host kernel equal to the interpreter bit for
  // bit; the factorisation (head_dim^3 / 2 multiply-adds, once per head) is cheap next to filling
  // M, which is what the lanes share. head_dim outside 1 .. kMaxMatrixDim: nothing is written
  // (the runners refuse it before allocating the scratch).
  void emit_matrix_stage(int s, int i);

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

}  // namespace kvevict::jit::detail
