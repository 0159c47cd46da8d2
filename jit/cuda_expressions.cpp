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
  // Bounded loads (the prelude's kv_load): h, q and t come from loops over the extents, but the
  // buffer's extent is checked again here, so no program can read outside it.
  switch (s) {
    case TensorSignal::WindowAttention:
      return "kv_load(a.window_attention, ((long long)h * a.W + q) * a.T + t, kv_extent_window(a), 0.0f)";
    case TensorSignal::AccumulatedAttention:
      return "kv_load(a.accumulated_attention, (long long)h * a.T + t, kv_extent_heads(a), 0.0f)";
    case TensorSignal::CurrentAttention:
      return "kv_load(a.current_attention, (long long)h * a.T + t, kv_extent_heads(a), 0.0f)";
    case TensorSignal::KeyNorm: return "kv_load(a.key_norm, t, kv_extent_tokens(a), 0.0f)";
    case TensorSignal::ValueNorm: return "kv_load(a.value_norm, t, kv_extent_tokens(a), 0.0f)";
    case TensorSignal::Position: return "(float)(a.position ? kv_load_int(a.position, t, kv_extent_tokens(a), t) : t)";
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
