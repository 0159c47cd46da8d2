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
  return "";
}

std::string cuda_load(TensorSignal s) {
  switch (s) {
    case TensorSignal::WindowAttention: return "a.window_attention[((size_t)h * a.W + q) * a.T + t]";
    case TensorSignal::AccumulatedAttention: return "a.accumulated_attention[(size_t)h * a.T + t]";
    case TensorSignal::CurrentAttention: return "a.current_attention[(size_t)h * a.T + t]";
    case TensorSignal::KeyNorm: return "a.key_norm[t]";
    case TensorSignal::ValueNorm: return "a.value_norm[t]";
    case TensorSignal::Position: return "(float)(a.position ? a.position[t] : t)";
  }
  return "";
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

}  // namespace kvevict::jit
