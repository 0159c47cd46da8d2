#pragma once
// The CUDA code generator for the DSL's lowered form (dsl/lowered.h).
//
// Scheme: every node becomes one device function `<prefix>_n<i>(args, h, q, c, e, mc, s, t)` that
// computes a single element of the node's tensor (c is the channel of axis d, e the second channel
// axis, mc the model axis c, s the second token axis; indices outside the node's shape are ignored). Elementwise nodes
// call their operands at the same indices, a renamed read (K[d, s]) calls its operand with the
// indices permuted; reductions over h, q, d, e and s and token windows are loops inside the
// function; the output node is evaluated by one thread per token. Token pairs (axes s and t) are
// therefore never stored: a reduction over s is a loop in the token's thread (s outermost, the
// interpreter's order), and a reduction over t that keeps s or e (and a normalise of such a value)
// is a loop inside the thread too, not a stage (O(T) per call: R-KV's kernel costs O(T^2 x
// head_dim) per token; the interpreter's tiles are the fast path on the CPU). The whole
// score program is therefore one fused kernel: one pass over the window attention per token,
// no intermediate tensor in memory and certainly no S x S matrix.
//
// Semantics follow the interpreter (dsl/interpreter.cpp) operation for operation so results agree
// to the last bit where the math library agrees: float accumulation in increasing index order,
// mean as sum times the reciprocal of the count, unbiased variance by a second pass, windows with
// the padding rule of lowered.h, NaN scores replaced by -infinity.
//
// Values that need every token before any token's score (reductions whose axes include t, and
// normalise(), whose divisor is a sum over t) are STAGES: each is computed once per (h, q) slot
// into the scratch buffer (kernel_abi.h: KVEVICT_STAGED_SCORE_ENTRY), in node order, before the
// per-token pass reads it. Stages accumulate in double over h, q, t like the interpreter; on the
// GPU a block's lanes split the tokens and are combined by a fixed tree, so only the order of the
// double additions differs (far below float resolution).
//
// Sort statistics (dsl/sort_ops.h): rank and sorted_cumsum are a loop over their axis inside the
// element's function (O(n) per element, O(T^2) per head along t); quantile counts ranks, O(n^2),
// and along t it is a stage (each lane takes candidates, combined by max). sorted_cumsum adds in
// index order where the interpreter adds in rank order: equal within one float ulp.
//
// #line: every emitted line is attributed to the policy-file line of the expression it
// implements (Node::line, set by the DSL checker); nodes without a position (programs built
// directly) fall back to the program's key (`score:`, `decode_score:`).
//
// channel_score programs (channel_score[d], core/engine/channel_selection.h) use the same scheme
// with the output axis d instead of t (KernelOutput::Channel, kernel_abi.h): one thread per key
// channel calls the output node at (0, 0, c, 0, 0, 0, 0); their stages and scratch are the score
// program's. A channel score's NaN is kept (the interpreter keeps it), a score's becomes -inf.
//
// layer_weight programs (one value per layer over every KV head: axis g, the `budget` scalar) use
// the same scheme with KernelOutput::Layer (kernel_abi.h, "Layer entries"): axis g is not an index
// parameter; a function at KV head g takes head g's argument set (kv_head_args), so `a.kv_head` is
// its g, a reduction over g loops `rg` calling its operand with kv_head_args(a, rg) (g outermost,
// the interpreter's order), and stage slots gain g ((g * G + h) * Wp + q) * Cp + c). Their
// reductions over t are stages like a score program's; the value is then one thread's call.
// Score programs never see g or `budget` (the DSL checker rejects them there; the generator
// refuses them too). Not generated: a sort along g (GenerateError, a UsageError whose message
// starts `file:line:col: error:`).
//
// inverse() (dsl/matrix_ops.h) is a MATRIX STAGE (kernel_abi.h): its operand M[h?, q?, d, e] does
// not depend on t, so it is filled and factorised once per (h, q) into the scratch, before the
// tokens, with the interpreter's own kv_spd_inverse text (Cholesky in double, the ridge
// fallback, NaN for a matrix that cannot be inverted); the token pass reads the inverse there.
#include <string>

#include "core/util/error.h"
#include "dsl/lowered.h"
#include "jit/codegen.h"
#include "jit/cuda_writer.h"

namespace kvevict::jit {

// The program cannot be turned into a kernel; the message names the policy file, the line and
// column of the construct, and the construct. Bad input to `kvevict compile`: exit 2.
class GenerateError : public UsageError {
 public:
  using UsageError::UsageError;
};

// What emit_score_program appended.
struct EmittedProgram {
  KernelOutput output = KernelOutput::Token;
  // float <prefix>_token(const KvScoreArgs&, int t), or <prefix>_channel(..., int c) for a channel program
  std::string element_function;
  std::string stage_function;  // void <prefix>_stage(const KvScoreArgs&, int stage, int h, int q, int c); empty without stages
  int stage_count = 0;         // stages to run, 0 .. stage_count - 1 in order, before the tokens
  MatrixScratch matrices;      // the matrix stages among them (inverse(); kernel_abi.h)
};

// Appends the device functions of `program` to `writer`. Lines are preceded by `#line N
// "<policy_file>"` for the expression they implement (or `where`, the program's key, for nodes
// without a position and for the program's own scaffolding).
// `output`: the program's output axis (kernel_abi.h): Token for score programs (output over t or
// a scalar), Channel for channel_score (output over d or a scalar), Layer for layer_weight (a
// scalar, and only for a layer_weight program); any other output is a GenerateError.
EmittedProgram emit_score_program(CudaWriter& writer, const dsl::LoweredProgram& program, const std::string& prefix,
                                  const std::string& policy_file, const SourceLocation& where = {},
                                  KernelOutput output = KernelOutput::Token);

// A complete kernel source: prelude, the score program as `kvevict_score`; when `decode` has
// nodes, the decode program as `kvevict_decode_score`; when `channel` has an output, the
// channel_score program as `kvevict_channel_score` (KVEVICT_CHANNEL_ENTRY: one thread per key
// channel, out[c] for c < head_dim); when `layer` has an output, the layer_weight program as
// `kvevict_layer_weight` (KVEVICT_LAYER_ENTRY: out[0]). Each gets `<entry>_stages` on the GPU when
// it has stages (GeneratedKernel::score_stages / decode_stages / channel_stages / layer_stages).
GeneratedKernel generate_score_kernels(const std::string& name, const std::string& policy_file,
                                       const dsl::LoweredProgram& score, const dsl::LoweredProgram* decode,
                                       const SourceLocation& score_at = {}, const SourceLocation& decode_at = {},
                                       const dsl::LoweredProgram* channel = nullptr, const SourceLocation& channel_at = {},
                                       const dsl::LoweredProgram* layer = nullptr, const SourceLocation& layer_at = {});

// The line of a top-level YAML key ("score", "decode_score") in a policy file; {} when absent.
SourceLocation find_policy_key(const std::string& policy_file, const std::string& key);
// The same in the file's text (`policy_file` names it in the location): a stored source compiles
// with the same #line directives as its file.
SourceLocation find_policy_key_in_text(const std::string& policy_file, const std::string& text, const std::string& key);

}  // namespace kvevict::jit
