// The CUDA code generator; scheme and limits in cuda_codegen.h. Compiled only when the DSL's
// lowered form is part of the tree.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "jit/cuda_codegen.h"
#include "jit/cuda_program_emitter.h"

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
#include "jit/work_growth.h"

namespace kvevict::jit {

namespace detail {

EmittedProgram ProgramEmitter::emit() {
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
    // A layer entry's scratch holds no matrices (its slots are laid per layer, not per KV head):
    // refused here as the checker refuses it in a policy file (dsl/matrix_ops.cpp), not written
    // past the scratch by a program built some other way.
    if (output_ == KernelOutput::Layer) fail(i, "inverse() in a layer_weight program");
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

SourceLocation ProgramEmitter::at(int i) const {
  if (i >= 0 && i < int(p_.nodes.size()) && p_.nodes[i].line > 0 && !file_.empty()) return {file_, p_.nodes[i].line};
  return where_;
}

[[noreturn]] void ProgramEmitter::fail(int i, const std::string& what) const {
  std::string pos = file_;
  if (i >= 0 && i < int(p_.nodes.size()) && p_.nodes[i].line > 0)
    pos += ":" + std::to_string(p_.nodes[i].line) + ":" + std::to_string(p_.nodes[i].col);
  else if (where_.line > 0)
    pos += ":" + std::to_string(where_.line) + ":1";
  throw GenerateError(pos + ": error: cannot generate CUDA for the " + prefix_ + " program: " + what);
}

void ProgramEmitter::emit_element_function(EmittedProgram& result) {
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

std::vector<int> ProgramEmitter::inline_closure(int i) const {
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

void ProgramEmitter::emit_function(int i) {
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

void ProgramEmitter::emit_inline(int i) {
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

void ProgramEmitter::emit_local(int i, int j) {
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

void ProgramEmitter::emit_rename(int i) {
  const Node& n = p_.nodes[i];
  const unsigned shape = p_.nodes[n.a].shape;
  std::string args = "(a";
  for (int k = 1; k < dsl::kNumAxes; ++k)
    args += std::string(", ") + kAxisVar[(shape & (1u << k)) ? dsl::rename_target(n, k) : k];
  if ((shape & dsl::kAxisG) && !p_.layer_context) fail(i, "axis g in a score program");
  line("return " + fn(n.a) + args + ");", at(i));
}

void ProgramEmitter::emit_window(int i) {
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

std::string ProgramEmitter::operand_at(int i, const std::string& v) const {
  const Node& n = p_.nodes[i];
  std::string args = "(a";
  for (int k = 1; k < dsl::kNumAxes; ++k) args += std::string(", ") + ((n.axes & (1u << k)) ? v : kAxisVar[k]);
  return fn(n.a) + args + ")";
}

void ProgramEmitter::emit_sort(int i) {
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

std::string ProgramEmitter::quantile_body(int i, bool lanes) {
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

}  // namespace detail

using dsl::NodeOp;

EmittedProgram emit_score_program(CudaWriter& writer, const dsl::LoweredProgram& program, const std::string& prefix,
                                  const std::string& policy_file, const SourceLocation& where, KernelOutput output) {
  return detail::ProgramEmitter(writer, program, prefix, policy_file, where, output).emit();
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
  // Tables are constants of the policy, not kernel arguments, so the kernel ABI and the per-call
  // uploads stay as they are: baked into the text up to dsl::kMaxBakedTableElements numbers (the
  // kernel cache keys on the text, so a new table file is a new kernel), a larger one declared as a
  // global of the module that each runner fills once after loading it (loaded_tables.h). Every
  // program of a policy shares the policy's table list, so one definition per table serves all of
  // its programs.
  std::set<int> tables_read;
  for (const dsl::LoweredProgram* p : {&score, has_decode ? decode : nullptr, has_channel ? channel : nullptr, layer})
    if (p)
      for (const dsl::Node& n : p->nodes)
        if (n.op == NodeOp::Table && n.lo >= 0 && n.lo < int(p->tables.size())) tables_read.insert(n.lo);
  for (int t : tables_read) {
    const std::shared_ptr<const dsl::TableData>& table = score.tables.at(size_t(t));
    writer.block(cuda_table_definition(t, *table));
    if (table_loaded_into_module(*table)) kernel.loaded_tables.push_back({cuda_table_symbol(t), table});
  }
  const EmittedProgram score_program = emit_score_program(writer, score, "score", policy_file, score_at);
  entry(kScoreEntry, score_program);
  kernel.entry_points.push_back(kScoreEntry);
  kernel.score_stages = score_program.stage_count;
  kernel.score_matrices = score_program.matrices;
  kernel.score_signals = score.uses;
  kernel.score_work_exponent = token_work_exponent(score);
  if (has_decode) {
    const EmittedProgram decode_program = emit_score_program(writer, *decode, "decode", policy_file, decode_at);
    entry(kDecodeScoreEntry, decode_program);
    kernel.entry_points.push_back(kDecodeScoreEntry);
    kernel.decode_stages = decode_program.stage_count;
    kernel.decode_matrices = decode_program.matrices;
    kernel.decode_signals = decode->uses;
    kernel.decode_work_exponent = token_work_exponent(*decode);
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
    kernel.channel_work_exponent = token_work_exponent(*channel, KernelOutput::Channel);
  }
  kernel.source = writer.text();
  return kernel;
}

}  // namespace kvevict::jit
#endif  // KVEVICT_HAVE_LOWERED_FORM
