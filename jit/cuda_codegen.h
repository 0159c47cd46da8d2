#pragma once
// The CUDA code generator for the DSL's lowered form (dsl/lowered.h).
//
// Scheme: every node becomes one device function `<prefix>_n<i>(args, h, q, t)` that computes a
// single element of the node's tensor (indices outside the node's shape are ignored). Elementwise
// nodes call their operands at the same indices; reductions over h and q and token windows are
// loops inside the function; the output node is evaluated by one thread per token. The whole
// score program is therefore one fused kernel: one pass over the window attention per token,
// no intermediate tensor in memory and certainly no S x S matrix.
//
// Semantics follow the interpreter (dsl/interpreter.cpp) operation for operation so results agree
// to the last bit where the math library agrees: float accumulation in increasing index order,
// mean as sum times the reciprocal of the count, unbiased variance by a second pass, windows with
// the padding rule of lowered.h, NaN scores replaced by -infinity.
//
// Not supported in kernels yet (GenerateError says so): reductions over t and Normalise inside a
// score program (they need a grid-wide reduction before the per-token pass), the Budget signal,
// and layer_weight programs (layer weights stay on the CPU: JitPolicyProgram delegates them).
#include <string>

#include "core/util/error.h"
#include "dsl/lowered.h"
#include "jit/codegen.h"
#include "jit/cuda_writer.h"

namespace kvevict::jit {

// The program cannot be turned into a kernel; the message says which construct.
class GenerateError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// Appends the device functions of `program` to `writer` and returns the name of the per-token
// function `float <prefix>_token(const KvScoreArgs&, int t)`. Every line is preceded by
// `#line <where.line> "<where.file>"` (when `where` is set): the lowered form carries no per-node
// source positions, so NVRTC messages cite the program's key in the policy file (e.g. `score:`).
std::string emit_score_program(CudaWriter& writer, const dsl::LoweredProgram& program, const std::string& prefix,
                               const std::string& policy_file, const SourceLocation& where = {});

// A complete kernel source: prelude, the score program as `kvevict_score` and, when `decode` has
// nodes, the decode program as `kvevict_decode_score`.
GeneratedKernel generate_score_kernels(const std::string& name, const std::string& policy_file,
                                       const dsl::LoweredProgram& score, const dsl::LoweredProgram* decode,
                                       const SourceLocation& score_at = {}, const SourceLocation& decode_at = {});

// The line of a top-level YAML key ("score", "decode_score") in a policy file; {} when absent.
SourceLocation find_policy_key(const std::string& policy_file, const std::string& key);

}  // namespace kvevict::jit
