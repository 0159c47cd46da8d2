// The CUDA generator's stages: values that need every token, computed into the scratch before
// the token pass (slots, split stages, matrix stages; cuda_codegen.h, kernel_abi.h).
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "jit/cuda_program_emitter.h"

#include <bit>
#include <set>

#include "dsl/matrix_ops.h"
#include "dsl/sort_ops.h"
#include "jit/cuda_expressions.h"

namespace kvevict::jit::detail {

std::string ProgramEmitter::slot_index(int i) const {
  const unsigned shape = p_.nodes[i].shape;
  std::string head = (shape & dsl::kAxisH) ? "(long long)h" : "0LL";
  if (shape & dsl::kAxisG) head = "((long long)a.kv_head * a.group + " + std::string((shape & dsl::kAxisH) ? "h" : "0") + ")";
  return "(long long)" + std::to_string(stage_of_.at(i)) + " * kv_stage_slots(a) + " + "(" + head +
         " * kv_stage_wp(a) + " + ((shape & dsl::kAxisQ) ? "q" : "0") + ") * kv_stage_cp(a) + " +
         ((shape & dsl::kAxisD) ? "c" : "0");
}

std::string ProgramEmitter::layout_args() const {
  return std::to_string(stages_.size()) + ", " + std::to_string(matrices_.count) + ", " + std::to_string(matrices_.axes);
}

std::string ProgramEmitter::matrix_slot(int i) const {
  const unsigned shape = p_.nodes[i].shape;
  return "((long long)" + std::string((shape & dsl::kAxisH) ? "h" : "0") + " * " +
         ((matrices_.axes & 2) ? "kv_stage_wp(a)" : "1") + " + " + ((shape & dsl::kAxisQ) ? "q" : "0") +
         ") * kv_matrix_size(a)";
}

std::string ProgramEmitter::matrix_out(int i) const {
  return "kv_matrix_out(a, " + std::to_string(stages_.size()) + ", " + std::to_string(matrices_.axes) + ", " +
         std::to_string(matrix_of_.at(i)) + ") + " + matrix_slot(i);
}

bool ProgramEmitter::is_split(int i) const {
  const Node& n = p_.nodes[i];
  if (!is_staged(n) || n.op == NodeOp::Inverse || n.op == NodeOp::Sort) return false;
  return !(n.shape & (dsl::kAxisH | dsl::kAxisQ | dsl::kAxisD));
}

std::string ProgramEmitter::split_cell(int step) const {
  return "kv_split_cell(a, " + layout_args() + ", " + std::to_string(step) + ", " + (p_.layer_context ? "a.kv_head" : "0") + ")";
}

void ProgramEmitter::emit_stage(int s, int i) {
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

void ProgramEmitter::combine_lanes(const std::string& v, int how, const SourceLocation& here) {
  line(v + " = kv_block_combine(" + v + ", " + std::to_string(how) + ");", here);
  if (split_) line("if (!kv_parts_combine(cell_, (int)part_, parts_, " + v + ", " + std::to_string(how) + ")) return;", here);
}

std::string ProgramEmitter::split_variance(int s, int i) {
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

void ProgramEmitter::emit_matrix_stage(int s, int i) {
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

}  // namespace kvevict::jit::detail
#endif  // KVEVICT_HAVE_LOWERED_FORM
