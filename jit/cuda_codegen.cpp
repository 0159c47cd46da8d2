// The CUDA code generator; scheme and limits in cuda_codegen.h. Compiled only when the DSL's
// lowered form is part of the tree.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "jit/cuda_codegen.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <vector>

#include "jit/kernel_abi.h"

namespace kvevict::jit {

namespace {

using dsl::BinaryFn;
using dsl::LoweredProgram;
using dsl::Node;
using dsl::NodeOp;
using dsl::Reducer;
using dsl::ScalarSignal;
using dsl::TensorSignal;
using dsl::UnaryFn;

bool is_boundary(const Node& n) { return n.op == NodeOp::Reduce || n.op == NodeOp::Window || n.op == NodeOp::Normalise; }

std::string float_literal(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  char text[64];
  std::snprintf(text, sizeof text, "kv_from_bits(0x%08xu) /* %.9g */", bits, double(value));
  return text;
}

class ProgramEmitter {
 public:
  ProgramEmitter(CudaWriter& w, const LoweredProgram& p, std::string prefix, std::string file, SourceLocation where)
      : w_(w), p_(p), prefix_(std::move(prefix)), file_(std::move(file)), where_(std::move(where)) {}

  std::string emit() {
    if (p_.output < 0 || p_.output >= int(p_.nodes.size())) throw GenerateError(where() + "the program is empty");
    if (p_.layer_context) throw GenerateError(where() + "layer_weight programs are evaluated on the CPU, not generated");
    const Node& out = p_.nodes[p_.output];
    if (out.shape & ~unsigned(dsl::kAxisT))
      throw GenerateError(where() + "a score must be per token or a scalar, not " + dsl::shape_name(out.shape));
    // Functions needed: the output, every reduction/window node it reaches, and their operands.
    std::set<int> functions = {p_.output};
    for (int i = int(p_.nodes.size()) - 1; i >= 0; --i) {
      if (!functions.count(i)) continue;
      for (int j : inline_closure(i)) {
        if (j != i && is_boundary(p_.nodes[j])) functions.insert(j);
      }
      if (is_boundary(p_.nodes[i])) functions.insert(p_.nodes[i].a);
    }
    for (int i : functions) emit_function(i);
    const std::string token = prefix_ + "_token";
    line("KVEVICT_FN float " + token + "(const KvScoreArgs& a, int t) {");
    w_.indent();
    line("const float v = " + fn(p_.output) + "(a, 0, 0, t);");
    line("return v != v ? -KVEVICT_INFINITY : v;  // NaN never outranks a real score");
    w_.dedent();
    line("}");
    return token;
  }

 private:
  std::string where() const { return file_ + ": " + prefix_ + ": "; }
  // Every line of the program is attributed to its place in the policy file (see the header).
  void line(const std::string& text) { w_.line(text, where_); }
  std::string fn(int i) const { return prefix_ + "_n" + std::to_string(i); }
  std::string var(int i) const { return "v" + std::to_string(i); }

  // Nodes computed inline in node i's function: i and, through elementwise edges, its operands,
  // stopping at (and including, as calls) reductions and windows. Sorted, so operands come first.
  std::vector<int> inline_closure(int i) const {
    std::set<int> seen;
    std::vector<int> stack = {i};
    while (!stack.empty()) {
      const int j = stack.back();
      stack.pop_back();
      if (!seen.insert(j).second) continue;
      const Node& n = p_.nodes[j];
      // A reduction or window is a call (j != i) or a loop whose operand is its own function.
      if (is_boundary(n)) continue;
      for (int o : {n.a, n.b, n.c})
        if (o >= 0) stack.push_back(o);
    }
    return std::vector<int>(seen.begin(), seen.end());
  }

  std::string scalar(ScalarSignal s) const {
    switch (s) {
      case ScalarSignal::T: return "(float)a.T";
      case ScalarSignal::W: return "(float)a.W";
      case ScalarSignal::G: return "(float)a.group";
      case ScalarSignal::Layer: return "(float)a.layer";
      case ScalarSignal::NLayers: return "(float)a.n_layers";
      case ScalarSignal::KvHead: return "(float)a.kv_head";
      case ScalarSignal::NKvHeads: return "(float)a.n_kv_heads";
      case ScalarSignal::HeadDim: return "(float)a.head_dim";
      case ScalarSignal::PromptLen: return "(float)a.prompt_len";
      case ScalarSignal::DecodeStep: return "(float)a.decode_step";
      case ScalarSignal::Budget: break;
    }
    throw GenerateError(where() + "the budget signal is not available in score kernels");
  }

  std::string load(TensorSignal s) const {
    switch (s) {
      case TensorSignal::WindowAttention: return "a.window_attention[((size_t)h * a.W + q) * a.T + t]";
      case TensorSignal::AccumulatedAttention: return "a.accumulated_attention[(size_t)h * a.T + t]";
      case TensorSignal::CurrentAttention: return "a.current_attention[(size_t)h * a.T + t]";
      case TensorSignal::KeyNorm: return "a.key_norm[t]";
      case TensorSignal::ValueNorm: return "a.value_norm[t]";
      case TensorSignal::Position: return "(float)(a.position ? a.position[t] : t)";
    }
    throw GenerateError(where() + "unknown tensor signal");
  }

  std::string unary(UnaryFn f, const std::string& x) const {
    switch (f) {
      case UnaryFn::Neg: return "-" + x;
      case UnaryFn::Not: return "(" + x + " != 0.0f ? 0.0f : 1.0f)";
      case UnaryFn::Exp: return "expf(" + x + ")";
      case UnaryFn::Log: return "logf(" + x + ")";
      case UnaryFn::Sqrt: return "sqrtf(" + x + ")";
      case UnaryFn::Abs: return "fabsf(" + x + ")";
      case UnaryFn::Floor: return "floorf(" + x + ")";
      case UnaryFn::Ceil: return "ceilf(" + x + ")";
      case UnaryFn::Round: return "roundf(" + x + ")";
    }
    throw GenerateError(where() + "unknown unary function");
  }

  std::string binary(BinaryFn f, const std::string& x, const std::string& y) const {
    switch (f) {
      case BinaryFn::Add: return x + " + " + y;
      case BinaryFn::Sub: return x + " - " + y;
      case BinaryFn::Mul: return x + " * " + y;
      case BinaryFn::Div: return x + " / " + y;
      case BinaryFn::Pow: return "powf(" + x + ", " + y + ")";
      case BinaryFn::Min: return "(" + y + " < " + x + " ? " + y + " : " + x + ")";
      case BinaryFn::Max: return "(" + y + " > " + x + " ? " + y + " : " + x + ")";
      case BinaryFn::Lt: return "(" + x + " < " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::Le: return "(" + x + " <= " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::Gt: return "(" + x + " > " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::Ge: return "(" + x + " >= " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::Eq: return "(" + x + " == " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::Ne: return "(" + x + " != " + y + " ? 1.0f : 0.0f)";
      case BinaryFn::And: return "((" + x + " != 0.0f && " + y + " != 0.0f) ? 1.0f : 0.0f)";
      case BinaryFn::Or: return "((" + x + " != 0.0f || " + y + " != 0.0f) ? 1.0f : 0.0f)";
    }
    throw GenerateError(where() + "unknown binary function");
  }

  void emit_function(int i) {
    const Node& n = p_.nodes[i];
    line("KVEVICT_FN float " + fn(i) + "(const KvScoreArgs& a, int h, int q, int t) {");
    w_.indent();
    line("(void)a; (void)h; (void)q; (void)t;");
    if (n.op == NodeOp::Reduce) emit_reduce(n);
    else if (n.op == NodeOp::Window) emit_window(n);
    else if (n.op == NodeOp::Normalise)
      throw GenerateError(where() + "normalise() over tokens is not supported in kernels yet");
    else emit_inline(i);
    w_.dedent();
    line("}");
  }

  // Elementwise closure of node i as locals in operand order; reductions and windows are calls.
  void emit_inline(int i) {
    for (int j : inline_closure(i)) {
      const Node& n = p_.nodes[j];
      std::string value;
      if (j != i && is_boundary(n)) {
        value = fn(j) + "(a, h, q, t)";
      } else {
        switch (n.op) {
          case NodeOp::Const: value = float_literal(n.value); break;
          case NodeOp::Scalar: value = scalar(n.scalar); break;
          case NodeOp::Load: value = load(n.tensor); break;
          case NodeOp::AxisIndex:
            value = n.axes == dsl::kAxisT ? "(float)t" : n.axes == dsl::kAxisQ ? "(float)q" : n.axes == dsl::kAxisH ? "(float)h" : "";
            if (value.empty()) throw GenerateError(where() + "index of axis " + dsl::shape_name(n.axes) + " in a score kernel");
            break;
          case NodeOp::Random: value = "kv_random(a, t)"; break;
          case NodeOp::Unary: value = unary(n.unary, var(n.a)); break;
          case NodeOp::Binary: value = binary(n.binary, var(n.a), var(n.b)); break;
          case NodeOp::Select: value = "(" + var(n.a) + " != 0.0f ? " + var(n.b) + " : " + var(n.c) + ")"; break;
          default: throw GenerateError(where() + "unexpected node in an elementwise closure");
        }
      }
      line("const float " + var(j) + " = " + value + ";");
    }
    line("return " + var(i) + ";");
  }

  // Reduction over h and/or q: float accumulation, h outer and q inner, in increasing order.
  void emit_reduce(const Node& n) {
    if (n.axes & (dsl::kAxisT | dsl::kAxisG))
      throw GenerateError(where() + "reductions over " + dsl::shape_name(n.axes & (dsl::kAxisT | dsl::kAxisG)) +
                          " are not supported in kernels yet");
    const bool over_h = n.axes & dsl::kAxisH, over_q = n.axes & dsl::kAxisQ;
    const std::string count = std::string("(") + (over_h ? "a.group" : "1") + " * " + (over_q ? "a.W" : "1") + ")";
    const std::string call = fn(n.a) + "(a, " + (over_h ? "rh" : "h") + ", " + (over_q ? "rq" : "q") + ", t)";
    auto loops = [&](const std::string& body) {
      line(std::string("for (int rh = 0; rh < ") + (over_h ? "a.group" : "1") + "; ++rh) {");
      w_.indent();
      line(std::string("for (int rq = 0; rq < ") + (over_q ? "a.W" : "1") + "; ++rq) {");
      w_.indent();
      line("const float x = " + call + ";");
      line(body);
      w_.dedent();
      line("}");
      w_.dedent();
      line("}");
    };
    switch (n.reducer) {
      case Reducer::Sum:
      case Reducer::Mean:
      case Reducer::Var:
        line("float s = 0.0f;");
        loops("s += x;");
        if (n.reducer == Reducer::Sum) {
          line("return s;");
          return;
        }
        line("const int count = " + count + ";");
        line("const float mean = s * (1.0f / (float)count);");
        if (n.reducer == Reducer::Mean) {
          line("return mean;");
          return;
        }
        line("float s2 = 0.0f;");
        loops("const float d = x - mean; s2 += d * d;");
        line("return s2 * (count > 1 ? 1.0f / (float)(count - 1) : 0.0f);");
        return;
      case Reducer::Max:
      case Reducer::Min: {
        const char* better = n.reducer == Reducer::Max ? "x > m" : "x < m";
        line("float m = 0.0f;");
        line("bool first = true;");
        loops(std::string("if (first) { m = x; first = false; } else { m = ") + better + " ? x : m; }");
        line("return m;");
        return;
      }
      case Reducer::Entropy:
        line("float s = 0.0f;");
        loops("s -= x > 0.0f ? x * logf(x) : 0.0f;");
        line("return s;");
        return;
    }
  }

  // Window over token offsets lo..hi with the padding rule of lowered.h.
  void emit_window(const Node& n) {
    const std::string lo = std::to_string(n.lo), hi = std::to_string(n.hi);
    const std::string call = fn(n.a) + "(a, h, q, t + k)";
    switch (n.reducer) {
      case Reducer::Sum:
      case Reducer::Mean:
        line("float s = 0.0f;");
        line("for (int k = " + lo + "; k <= " + hi + "; ++k)");
        line("  if (t + k >= 0 && t + k < a.T) s += " + call + ";");
        line(n.reducer == Reducer::Sum ? "return s;" : "return s * (1.0f / (float)(" + hi + " - (" + lo + ") + 1));");
        return;
      case Reducer::Max:
      case Reducer::Min: {
        const bool is_max = n.reducer == Reducer::Max;
        line("if (t + (" + hi + ") < 0 || t + (" + lo + ") >= a.T) return 0.0f;  // no offset in range");
        line(std::string("float m = ") + (is_max ? "-" : "") + "KVEVICT_INFINITY;");
        line("for (int k = " + lo + "; k <= " + hi + "; ++k) {");
        w_.indent();
        line("if (t + k < 0 || t + k >= a.T) continue;");
        line("const float x = " + call + ";");
        line(std::string("m = ") + (is_max ? "x > m" : "x < m") + " ? x : m;");
        w_.dedent();
        line("}");
        line("return m;");
        return;
      }
      default:
        throw GenerateError(where() + "a token window supports sum, mean, max and min only");
    }
  }

  CudaWriter& w_;
  const LoweredProgram& p_;
  std::string prefix_, file_;
  SourceLocation where_;
};

}  // namespace

std::string emit_score_program(CudaWriter& writer, const dsl::LoweredProgram& program, const std::string& prefix,
                               const std::string& policy_file, const SourceLocation& where) {
  return ProgramEmitter(writer, program, prefix, policy_file, where).emit();
}

SourceLocation find_policy_key(const std::string& policy_file, const std::string& key) {
  std::ifstream in(policy_file);
  std::string text;
  int number = 0;
  while (std::getline(in, text)) {
    ++number;
    if (text.compare(0, key.size() + 1, key + ":") == 0) return {policy_file, number};
  }
  return {};
}

GeneratedKernel generate_score_kernels(const std::string& name, const std::string& policy_file,
                                       const dsl::LoweredProgram& score, const dsl::LoweredProgram* decode,
                                       const SourceLocation& score_at, const SourceLocation& decode_at) {
  GeneratedKernel kernel;
  kernel.name = name;
  kernel.policy_file = policy_file;
  CudaWriter writer(name);
  writer.block("// Generated by kvevict from " + policy_file + "; do not edit.\n");
  writer.block(kernel_prelude());
  const std::string score_token = emit_score_program(writer, score, "score", policy_file, score_at);
  writer.line("KVEVICT_SCORE_ENTRY(kvevict_score, " + score_token + ")");
  kernel.entry_points.push_back("kvevict_score");
  auto signals = [](const dsl::LoweredProgram& p) {
    std::vector<int> read;
    for (int s = 0; s < dsl::kNumTensorSignals; ++s)
      if (p.uses[s]) read.push_back(s);
    return read;
  };
  kernel.score_signals = signals(score);
  if (decode && !decode->nodes.empty()) {
    const std::string decode_token = emit_score_program(writer, *decode, "decode", policy_file, decode_at);
    writer.line("KVEVICT_SCORE_ENTRY(kvevict_decode_score, " + decode_token + ")");
    kernel.entry_points.push_back("kvevict_decode_score");
    kernel.decode_signals = signals(*decode);
  }
  kernel.source = writer.text();
  return kernel;
}

}  // namespace kvevict::jit
#endif  // KVEVICT_HAVE_LOWERED_FORM
