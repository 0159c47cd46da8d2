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
    KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_CUDA_SCALAR) KVEVICT_LAYER_SCALAR_SIGNALS(KVEVICT_CUDA_SCALAR)
#undef KVEVICT_CUDA_SCALAR
  }
  return "";
}

namespace {

// The axes a tensor signal's buffer can have, in its row-major order (core/engine/signals.h: the
// canonical axis order, t innermost), with the generated functions' index variable of each (d is
// `c`, the model axis c is `mc`) and its extent in KvScoreArgs.
struct LoadAxis {
  unsigned bit;
  const char* var;
  const char* extent;
};
constexpr LoadAxis kLoadAxes[] = {{dsl::kAxisH, "h", "a.group"},   {dsl::kAxisQ, "q", "a.W"},
                                  {dsl::kAxisD, "c", "a.head_dim"}, {dsl::kAxisE, "e", "a.head_dim"},
                                  {dsl::kAxisC, "mc", "a.n_embd"},  {dsl::kAxisT, "t", "a.T"}};

// The flat row-major index of the element at the functions' indices, with the index of axis
// `zero` (a bit, or 0 for none) replaced by 0: a row's first element.
std::string flat_index(unsigned axes, unsigned zero) {
  std::string index;
  for (const LoadAxis& x : kLoadAxes) {
    if (!(axes & x.bit)) continue;
    const std::string v = x.bit == zero ? "0" : x.var;
    if (x.bit == dsl::kAxisT) index = index.empty() ? v : index + " * " + x.extent + " + " + v;
    else index = index.empty() ? "(long long)" + v : "(" + index + " * " + x.extent + " + " + v + ")";
  }
  return index.empty() ? "0LL" : index;
}

// The buffer's extent in elements, from the scalars of KvScoreArgs (the prelude's kv_extent_axes).
std::string buffer_extent(unsigned axes) {
  const bool has_d = axes & dsl::kAxisD, has_e = axes & dsl::kAxisE;
  return std::string("kv_extent_axes(a, ") + ((axes & dsl::kAxisH) ? "1" : "0") + ", " + ((axes & dsl::kAxisQ) ? "1" : "0") +
         ", " + (has_d ? (has_e ? "2" : "1") : "0") + ", " + ((axes & dsl::kAxisT) ? "1" : "0") + ")" +
         ((axes & dsl::kAxisC) ? " * kv_nonneg(a.n_embd)" : "");
}

std::string buffer_pointer(TensorSignal s) {
  return "a.tensor[" + std::to_string(kvevict::signal_index(s)) + "] /* " + std::string(kvevict::signal_info(s).dsl_name) + " */";
}

}  // namespace

std::string cuda_load(TensorSignal s) {
  // Bounded loads (the prelude's kv_load): h, q and t come from loops over the extents, but the
  // buffer's extent is checked again here, so no program can read outside it. The index and the
  // extent follow from the signal's axes in the signal table: row-major over h, q, t.
  if (s == TensorSignal::Position)
    return "(float)(a.position ? kv_load_int(a.position, t, kv_extent_tokens(a), t) : t)";
  const unsigned axes = kvevict::signal_axes(s);
  return "kv_load(" + buffer_pointer(s) + ", " + flat_index(axes, 0) + ", " + buffer_extent(axes) + ", 0.0f)";
}

CudaLoadRow cuda_load_row(TensorSignal s, unsigned axis) {
  const unsigned axes = kvevict::signal_axes(s);
  if (s == TensorSignal::Position || !(axes & axis)) return {};
  CudaLoadRow row;
  row.pointer = buffer_pointer(s);
  row.base = "(long long)(" + flat_index(axes, axis) + ")";
  // The stride of `axis`: the product of the extents of the axes after it.
  row.stride = "1LL";
  bool after = false;
  for (const LoadAxis& x : kLoadAxes) {
    if (after && (axes & x.bit)) row.stride += std::string(" * (long long)") + x.extent;
    after = after || x.bit == axis;
  }
  row.extent = buffer_extent(axes);
  return row;
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

bool table_loaded_into_module(const dsl::TableData& table) { return table.values.size() > dsl::kMaxBakedTableElements; }

std::string cuda_table_symbol(int index) { return "kv_table_" + std::to_string(index); }

std::string cuda_table_definition(int index, const dsl::TableData& table) {
  std::string text = "// table '" + table.name + "' " + table.shape_text();
  if (table_loaded_into_module(table))
    return text + ": loaded into the module after it is (jit/loaded_tables.h)\nKVEVICT_LOADED_TABLE(" +
           cuda_table_symbol(index) + ", " + std::to_string(table.values.size()) + ");\n";
  text += "\nKVEVICT_TABLE " + cuda_table_symbol(index) + "[" + std::to_string(table.values.size()) + "] = {";
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
  return "((" + in_range + ") ? kv_load(" + cuda_table_symbol(index) + ", " + flat + ", " +
         std::to_string(table.values.size()) + "LL, 0.0f) : 0.0f) /* " + table.name + " */";
}

}  // namespace kvevict::jit
