// CUDA expression text; see cuda_expressions.h.
#include "jit/cuda_expressions.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace kvevict::jit {

using dsl::BinaryFn;
using dsl::ScalarSignal;
using dsl::TensorSignal;
using dsl::UnaryFn;

std::string cuda_float_literal(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  char text[64];
  std::snprintf(text, sizeof text, "kv_from_bits(0x%08xu) /* %.9g */", bits, double(value));
  return text;
}

std::string cuda_scalar(ScalarSignal s) {
  switch (s) {  // KvScoreArgs has ScoreInputs' field names (kernel_abi.h)
#define KVEVICT_CUDA_SCALAR(name, dsl, field) \
  case ScalarSignal::name: return "(float)a." #field;
    KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_CUDA_SCALAR)
#undef KVEVICT_CUDA_SCALAR
    default: break;  // layer scalars do not exist in a score kernel
  }
  return "";
}

std::string cuda_load(TensorSignal s) {
  // Bounded loads (the prelude's kv_load): h, q and t come from loops over the extents, but the
  // buffer's extent is checked again here, so no program can read outside it. The index and the
  // extent follow from the signal's axes in the signal table: row-major over h, q, t.
  if (s == TensorSignal::Position)
    return "(float)(a.position ? kv_load_int(a.position, t, kv_extent_tokens(a), t) : t)";
  // The channel index of axis d is the generated functions' parameter `c`.
  const unsigned axes = kvevict::signal_axes(s);
  const bool has_h = axes & dsl::kAxisH, has_q = axes & dsl::kAxisQ, has_d = axes & dsl::kAxisD;
  const bool has_t = axes & dsl::kAxisT;  // Q, Q_mean, ... have no token axis
  const bool has_e = axes & dsl::kAxisE;  // the second channel axis (Q_cov[h, d, e]): parameter `e`
  const bool has_c = axes & dsl::kAxisC;  // the model dimension (hidden[c, t]): parameter `mc`
  std::string index = has_h ? "(long long)h" : "";
  if (has_q) index = index.empty() ? "(long long)q" : "(" + index + " * a.W + q)";
  if (has_d) index = index.empty() ? "(long long)c" : "(" + index + " * a.head_dim + c)";
  if (has_e) index = index.empty() ? "(long long)e" : "(" + index + " * a.head_dim + e)";
  if (has_c) index = index.empty() ? "(long long)mc" : "(" + index + " * a.n_embd + mc)";
  if (has_t) index = index.empty() ? "t" : index + " * a.T + t";
  else if (index.empty()) index = "0LL";
  const std::string slot = std::to_string(kvevict::signal_index(s));
  return "kv_load(a.tensor[" + slot + "] /* " + std::string(kvevict::signal_info(s).dsl_name) + " */, " + index +
         ", kv_extent_axes(a, " + (has_h ? "1" : "0") + ", " + (has_q ? "1" : "0") + ", " + (has_d ? (has_e ? "2" : "1") : "0") +
         ", " + (has_t ? "1" : "0") + ")" + (has_c ? " * kv_nonneg(a.n_embd)" : "") + ", 0.0f)";
}

std::string cuda_unary(UnaryFn f, const std::string& x) {
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
    case UnaryFn::Sin: return "sinf(" + x + ")";
    case UnaryFn::Cos: return "cosf(" + x + ")";
    case UnaryFn::Gelu:  // dsl/elementwise.h: the exact (erf) form of torch.nn.GELU, in float
      return "(0.5f * (" + x + ") * (1.0f + erff((" + x + ") * 0.70710678118654752f)))";
  }
  return "";
}

std::string cuda_binary(BinaryFn f, const std::string& x, const std::string& y) {
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
  return "";
}

std::string cuda_table_definition(int index, const dsl::TableData& table) {
  std::string text = "// table '" + table.name + "' " + table.shape_text() + "\n";
  text += "KVEVICT_TABLE kv_table_" + std::to_string(index) + "[" + std::to_string(table.values.size()) + "] = {";
  char literal[48];
  for (size_t i = 0; i < table.values.size(); ++i) {
    std::snprintf(literal, sizeof literal, "%a", double(table.values[i]));
    text += std::string(i % 8 == 0 ? "\n  " : " ") + literal + "f,";
  }
  return text + "\n};\n";
}

std::string cuda_table_read(int index, const dsl::TableData& table, const std::string& row) {
  // The flat index over the axes the table has, in the storage order (table_data.h); an index of
  // an axis outside its extent reads 0 like TableData::at. The row is the nearest integer to the
  // scalar `row` (llround, as the interpreter; NaN reads 0); head = kv_head * group + h.
  std::string in_range = "1", flat = "0LL";
  for (dsl::TableAxis axis : dsl::kTableAxisOrder) {
    if (!table.has_axis(axis)) continue;
    std::string v;
    switch (axis) {
      case dsl::TableAxis::Index:
        v = "((isfinite(" + row + ") && fabsf(" + row + ") < 1e15f) ? llround((double)" + row + ") : -1LL)";
        break;
      case dsl::TableAxis::Layer: v = "(long long)a.layer"; break;
      case dsl::TableAxis::KvHead: v = "(long long)a.kv_head"; break;
      case dsl::TableAxis::Head: v = "((long long)a.kv_head * (long long)a.group + (long long)h)"; break;
      case dsl::TableAxis::D: v = "(long long)c"; break;
      case dsl::TableAxis::E: v = "(long long)e"; break;
      case dsl::TableAxis::C: v = "(long long)mc"; break;  // the model axis c is `mc` in generated code
    }
    const std::string n = std::to_string(table.extent_of(axis));
    in_range += " && " + v + " >= 0 && " + v + " < " + n;
    flat = "(" + flat + " * " + n + "LL + " + v + ")";
  }
  return "((" + in_range + ") ? kv_load(kv_table_" + std::to_string(index) + ", " + flat + ", " +
         std::to_string(table.values.size()) + "LL, 0.0f) : 0.0f) /* " + table.name + " */";
}

}  // namespace kvevict::jit
