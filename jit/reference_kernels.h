#pragma once
// Hand-written kernels with plain C++ references. They exist before (and independently of) the
// code generator: the NVRTC and host-compiler tests use them, the semantic-check harness is proven
// on them, and the benchmarks use them as the hand-written baseline a generated kernel must match.
//
// CAKE's prefill indicator (spec/policies.md §2.4), per KV head g with query heads h of its group:
//   m[h,t] = mean over the W window rows of A[h,q,t]
//   v[h,t] = unbiased variance over the same rows (0 when W < 2)
//   I[h,t] = m + gamma * v
//   p[h,t] = (1/kernel) * sum_{k=-kernel/2..kernel/2} I[h,t+k]     (zero padding at both ends)
//   score[t] = mean over h of p[h,t]
#include <string>

#include "core/engine/policy_program.h"

namespace kvevict::jit {

// Entry point name of the kernel below.
inline constexpr const char* kCakeIndicatorEntry = "kvevict_cake_indicator";

// The device functions NAME_column and NAME_token(const KvScoreArgs&, int t) with gamma and kernel
// baked in as constants; needs the prelude before it. Several can share one source.
std::string cake_indicator_functions(float gamma, int kernel, const std::string& name);

// Complete kernel source (prelude included) with gamma and kernel baked in as constants.
std::string cake_indicator_source(float gamma, int kernel);

// The same formula as a straightforward loop (float accumulation in the same order as the kernel).
void cake_indicator_reference(const ScoreInputs& in, float gamma, int kernel, float* out);

}  // namespace kvevict::jit
