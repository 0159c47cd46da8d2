#pragma once
// The binary interface between scoring kernels (generated or hand-written) and their callers.
// The same struct definition is compiled into kvevict and pasted, as text, at the top of every
// kernel source (kernel_prelude()), so the layouts cannot drift apart. It mirrors
// kvevict::ScoreInputs (core/engine/policy_program.h) with device pointers; both sides are LP64.
// `tensor` is indexed by kvevict::TensorSignal, sized by the signal table (core/engine/signals.h):
// a new signal changes no line here.
//
// Entry point convention (KVEVICT_SCORE_ENTRY in the prelude):
//   CUDA: extern "C" __global__ void NAME(KvScoreArgs args, float* out)   one thread per token t
//   host: extern "C" void NAME(const KvScoreArgs* args, float* out)      a loop over t
// out[t] receives the score of cache entry t, for t in 0..T-1.
//
// Staged programs (reductions over the token axis t, normalise(); KVEVICT_STAGED_SCORE_ENTRY):
// values that need every token are computed first, by stages, into `scratch`, then the per-token
// kernel reads them. Slot k of stage s is scratch[s * kv_stage_slots(args) + k],
// k = (h * Wp + q) * Cp + c with Wp = max(W, 1) and Cp = max(head_dim, 1) (c: the channel, axis d),
// so the scratch holds n_stages * group * Wp * Cp floats. Slots outside a value's shape return at
// once (a stage whose value has no axis d uses the slots with c = 0 only).
//   CUDA: extern "C" __global__ void NAME_stages(KvScoreArgs args, int stage)   launched once per
//         stage in increasing order, grid = group * Wp * Cp blocks (one per slot) of exactly
//         kStageThreads threads, then NAME as above; args.scratch must point at the scratch.
//   host: NAME alone runs every stage on its own scratch (args->scratch is ignored), then the
//         token loop: the host ABI does not change.
#include <string>

#include "core/engine/signals.h"

#define KVEVICT_DEFINE_KERNEL_ABI                                           \
  struct KvScoreArgs {                                                      \
    int layer; int kv_head; int n_layers; int n_kv_heads; int group;        \
    int head_dim; int T; int prompt_len; int decode_step; int W;            \
    int n_embd;                                                             \
    const float* tensor[KVEVICT_NUM_TENSOR_SIGNALS];                        \
    const int* position;                                                    \
    unsigned long long seed;                                                \
    float* scratch;                                                         \
  };

namespace kvevict {
struct ScoreInputs;
}

namespace kvevict::jit {

KVEVICT_DEFINE_KERNEL_ABI

static_assert(sizeof(KvScoreArgs) == 48 + kNumTensorSignals * 8 + 8 + 8 + 8, "KvScoreArgs layout must match the kernel text");
static_assert(sizeof(KvScoreArgs::tensor) / sizeof(KvScoreArgs::tensor[0]) == kNumTensorSignals);

// Threads per block of a stage kernel (a power of two; the prelude's block reductions assume it).
inline constexpr unsigned kStageThreads = 256;

// Copies the scalars of `in`; the pointers are copied as they are (host pointers): callers that
// launch on a GPU replace them with device addresses. `scratch` is null.
KvScoreArgs to_kernel_args(const ScoreInputs& in);

// The text every kernel source starts with: portability macros (CUDA under NVRTC, plain C++ for
// the host semantic check), KvScoreArgs, bounded loads and KVEVICT_SCORE_ENTRY.
const std::string& kernel_prelude();

}  // namespace kvevict::jit
