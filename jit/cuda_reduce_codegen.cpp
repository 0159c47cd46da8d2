// The CUDA generator's reductions: float loops over g, h, q, d, e, c and s (row reductions read
// through a pointer), double reductions over t, variances and inline normalise (cuda_codegen.h).
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "jit/cuda_program_emitter.h"

#include <bit>
#include <set>

#include "dsl/matrix_ops.h"
#include "dsl/sort_ops.h"
#include "jit/cuda_expressions.h"

namespace kvevict::jit::detail {

bool ProgramEmitter::is_float_mean(int k) const {
  const Node& n = p_.nodes[k];
  return n.op == NodeOp::Reduce && n.reducer == Reducer::Mean && !(n.axes & dsl::kAxisT) && !is_staged(n);
}

std::string ProgramEmitter::reduced_call(int i) const {
  const Node& n = p_.nodes[i];
  std::string args = (n.axes & dsl::kAxisG) ? "(kv_head_args(a, rg)" : "(a";
  for (int k = 1; k < dsl::kNumAxes; ++k) args += std::string(", ") + ((n.axes & (1u << k)) ? "r" : "") + kAxisVar[k];
  return fn(n.a) + args + ")";
}

std::vector<int> ProgramEmitter::reduced_order(int i) const {
  const Node& n = p_.nodes[i];
  std::vector<int> order;
  const bool s_first = (n.axes & dsl::kAxisS) && dsl::is_token_pair(p_.nodes[n.a].shape);
  if (s_first) order.push_back(kvevict::kAxisIndexS);
  for (int k = 0; k < dsl::kNumAxes; ++k)
    if ((n.axes & (1u << k)) && !(s_first && k == kvevict::kAxisIndexS)) order.push_back(k);
  return order;
}

std::string ProgramEmitter::reduced_count(int i) const {
  std::string count = "(1";
  for (int k = 0; k < dsl::kNumAxes; ++k)
    if (p_.nodes[i].axes & (1u << k)) count += std::string(" * (double)") + kAxisExtent[k];
  return count + ")";
}

void ProgramEmitter::reduce_loops(int i, const std::string& type, const std::string& body, bool lanes) {
  reduce_loops_over(i, type, reduced_call(i), body, lanes);
}

void ProgramEmitter::reduce_loops_over(int i, const std::string& type, const std::string& operand, const std::string& body,
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

bool ProgramEmitter::is_row_reduction(int i) const {
  const Node& n = p_.nodes[i];
  if (n.op != NodeOp::Reduce || (n.axes & dsl::kAxisT) || std::popcount(n.axes) != 1) return false;
  const Node& operand = p_.nodes[n.a];
  return operand.op == NodeOp::Load && !cuda_load_row(operand.tensor, n.axes).pointer.empty();
}

template <class Emit>
void ProgramEmitter::with_row(int i, Emit emit) {
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

void ProgramEmitter::emit_reduce(int i) {
  const Node& n = p_.nodes[i];
  const SourceLocation here = at(i);
  if ((n.axes & dsl::kAxisG) && !p_.layer_context) fail(i, "a reduction over g in a score program");
  switch (n.reducer) {
    case Reducer::Sum:
    case Reducer::Mean:
    case Reducer::Var:
      // 64 bits, as the interpreter counts: a reduction over (s, d, e) at T = 128K and head_dim 128
      // has 2^31 elements, which an int would wrap (the host build) or saturate (the device).
      line("const long long count = (long long)" + reduced_count(i) + ";", here);
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

void ProgramEmitter::emit_var_about(int i) {
  const SourceLocation here = at(i);
  line("KVEVICT_FN float " + var_about(i) + "(" + kParams + ", float mean) {", here);
  w_.indent();
  line("(void)a; (void)h; (void)q; (void)c; (void)e; (void)mc; (void)s; (void)t;", here);
  line("const long long count = (long long)" + reduced_count(i) + ";", here);
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

bool ProgramEmitter::is_float_var(int j) const {
  const Node& n = p_.nodes[j];
  return n.op == NodeOp::Reduce && n.reducer == Reducer::Var && !(n.axes & dsl::kAxisT) && !is_staged(n);
}

std::string ProgramEmitter::double_reduction(int i, Reducer r, bool lanes) {
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

void ProgramEmitter::emit_token_reduce(int i, bool) {
  if ((p_.nodes[i].axes & dsl::kAxisG) && !p_.layer_context) fail(i, "a reduction over g in a score program");
  const std::string result = double_reduction(i, p_.nodes[i].reducer, false);
  line("return " + result + ";", at(i));
}

void ProgramEmitter::emit_inline_normalise(int i) {
  const Node& n = p_.nodes[i];
  const SourceLocation here = at(i);
  line("double sum = 0.0;", here);
  line("for (int rt = 0; rt < a.T; ++rt) sum += (double)" + fn(n.a) + "(a, h, q, c, e, mc, s, rt);", here);
  line("const float inv = sum != 0.0 ? (float)(1.0 / sum) : 0.0f;", here);
  line("return " + fn(n.a) + kArgs + " * inv;", here);
}

}  // namespace kvevict::jit::detail
#endif  // KVEVICT_HAVE_LOWERED_FORM
