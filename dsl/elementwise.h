#pragma once
// The scalar semantics of every elementwise function of the lowered form, shared by the
// interpreter's loops and the compile-time constant folder so both agree bit for bit. The CUDA
// code generator emits the same expressions (expf, logf, ... in float). One exception: the
// interpreter takes log of arrays with a vectorised log within 2 ulp of this one
// (core/decode/simd_math.h log_array), the same bound as CUDA's logf.
#include <cmath>

#include "dsl/lowered.h"

namespace kvevict::dsl {

inline float apply_unary(UnaryFn f, float x) {
  switch (f) {
    case UnaryFn::Neg: return -x;
    case UnaryFn::Not: return x != 0.0f ? 0.0f : 1.0f;
    case UnaryFn::Exp: return std::exp(x);
    case UnaryFn::Log: return std::log(x);
    case UnaryFn::Sqrt: return std::sqrt(x);
    case UnaryFn::Abs: return std::fabs(x);
    case UnaryFn::Floor: return std::floor(x);
    case UnaryFn::Ceil: return std::ceil(x);
    case UnaryFn::Round: return std::round(x);
    case UnaryFn::Sin: return std::sin(x);
    case UnaryFn::Cos: return std::cos(x);
    // torch.nn.GELU() (approximate='none'): x * Phi(x) with the exact erf, evaluated in float.
    case UnaryFn::Gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
  }
  return x;
}

inline float apply_binary(BinaryFn f, float x, float y) {
  switch (f) {
    case BinaryFn::Add: return x + y;
    case BinaryFn::Sub: return x - y;
    case BinaryFn::Mul: return x * y;
    case BinaryFn::Div: return x / y;
    case BinaryFn::Pow: return std::pow(x, y);
    case BinaryFn::Min: return y < x ? y : x;
    case BinaryFn::Max: return y > x ? y : x;
    case BinaryFn::Lt: return x < y ? 1.0f : 0.0f;
    case BinaryFn::Le: return x <= y ? 1.0f : 0.0f;
    case BinaryFn::Gt: return x > y ? 1.0f : 0.0f;
    case BinaryFn::Ge: return x >= y ? 1.0f : 0.0f;
    case BinaryFn::Eq: return x == y ? 1.0f : 0.0f;
    case BinaryFn::Ne: return x != y ? 1.0f : 0.0f;
    case BinaryFn::And: return (x != 0.0f && y != 0.0f) ? 1.0f : 0.0f;
    case BinaryFn::Or: return (x != 0.0f || y != 0.0f) ? 1.0f : 0.0f;
  }
  return x;
}

}  // namespace kvevict::dsl
