#pragma once
// How a generated kernel's work grows with the tokens T (issue 10: a run that cannot finish is
// refused, not run). In the generator's scheme (cuda_codegen.h) a value that is not staged is
// recomputed inside each caller's thread, so its loops over s or t nest in the caller's: R-KV's
// `dropped[t] = sum(s: if(t == drop[s], ...))`, with drop[s] a max over t, costs O(T^2 x head_dim)
// per token. This counts those loops on the lowered program, without generating it.
//
// The exponent k: scoring one head costs about T^k x (its other loops: channels, group, window)
// operations. 1 for a plain per-token score (CAKE, SnapKV), 2 for a sum over s of a token pair or a
// rank along t, 3 for R-KV. A token kernel's threads are the T tokens (1 + the loops nested in the
// output's thread); a channel kernel's are the head_dim channels; a stage runs once per slot (its
// own loops over s and t, and the loops nested in its operand's thread).
#include <cstdint>
#include <string>

#include "dsl/lowered.h"
#include "jit/kernel_abi.h"

namespace kvevict::jit {

// The exponent of T for `program` generated as a `output` kernel (Token or Channel); 0 for an
// empty program. Layer entries are not counted (one value per layer).
int token_work_exponent(const dsl::LoweredProgram& program, KernelOutput output = KernelOutput::Token);

// The most operations one head's scoring may cost before it is refused: T^k x head_dim above
// 2^44 (R-KV's k = 3 at head_dim 128 stops near 5K tokens; a k = 2 program reaches 128K).
inline constexpr double kMostHeadWork = static_cast<double>(int64_t{1} << 44);

// Refuses (UsageError naming the policy, its exponent and T) scoring `T` tokens at `head_dim`
// channels with a kernel of exponent `k` whose work passes kMostHeadWork. `what`: the policy.
void refuse_unfinishable_work(const std::string& what, int k, int64_t T, int head_dim);

}  // namespace kvevict::jit
