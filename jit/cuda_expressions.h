#pragma once
// CUDA C++ text of the lowered form's scalar operations (dsl/lowered.h), one expression each. The
// spelling follows dsl/elementwise.h operation for operation (float functions, the same operand
// order in min/max, comparisons as 1/0), so generated code rounds like the interpreter.
#include <string>

#include "dsl/lowered.h"

namespace kvevict::jit {

// A float constant by its exact bits (no decimal round trip), with the value as a comment.
std::string cuda_float_literal(float value);
// The scalar signal read from `const KvScoreArgs& a`; empty for Budget (not in KvScoreArgs).
std::string cuda_scalar(dsl::ScalarSignal s);
// The tensor signal at indices (h, q, t) of `a`; empty for an unknown signal.
std::string cuda_load(dsl::TensorSignal s);
// fn(x) / fn(x, y) over already-evaluated operands (names of locals); empty for an unknown fn.
std::string cuda_unary(dsl::UnaryFn f, const std::string& x);
std::string cuda_binary(dsl::BinaryFn f, const std::string& x, const std::string& y);

}  // namespace kvevict::jit
