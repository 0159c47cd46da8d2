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
// Channel entries (KVEVICT_CHANNEL_ENTRY, the `channel_score[d]` program; KernelOutput::Channel
// below) are the same with the output axis d instead of t: one thread per key channel c, out[c]
// for c in 0..head_dim-1, same arguments, same stages.
//
// Staged programs (reductions over the token axis t, normalise(); KVEVICT_STAGED_SCORE_ENTRY):
// values that need every token are computed first, by stages, into `scratch`, then the per-token
// kernel reads them. Slot k of stage s is scratch[s * kv_stage_slots(args) + k],
// k = (h * Wp + q) * Cp + c with Wp = max(W, 1) and Cp = max(head_dim, 1) (c: the channel, axis d),
// so the scratch holds n_stages * group * Wp * Cp floats. Slots outside a value's shape return at
// once (a stage whose value has no axis d uses the slots with c = 0 only).
//   CUDA: extern "C" __global__ void NAME_stages(KvScoreArgs args, int stage)   launched once per
//         stage in increasing order, grid = stage_grid_blocks(slots) blocks (block b runs slots
//         b, b + grid, ...; slots = group * Wp * Cp, times the KV heads in a layer kernel) of exactly
//         kStageThreads threads, then NAME as above; args.scratch must point at the scratch.
//   host: NAME alone runs every stage on its own scratch (args->scratch is ignored), then the
//         token loop: the host ABI does not change.
//
// Split stages: a staged reduction whose value has no axis h, q or d (a scalar per KV head, such
// as CAKE's layer preference, a sum over g, h, q and t) would otherwise run on one block. It is
// spread over P = kv_stage_parts(args) blocks (the head's slots 0 .. P-1; P = min(128,
// kv_stage_head_slots) on the GPU, KVEVICT_HOST_STAGE_PARTS (default 1) on the host): part p's
// lanes take the tokens t = p * lanes + lane, ... in steps of P * lanes, each block adds its lanes
// in the fixed tree, writes its partial into the stage's cell and the last block to finish adds
// the P partials in part order (kv_parts_combine), so a launch's bits do not depend on timing. A
// variance takes two steps (two stages): the mean, carried in the cell, then the squares. The
// cells follow the float slots and the matrices (kv_split_base, even): n_stages *
// kv_layer_heads(args) cells of KVEVICT_MAX_STAGE_PARTS + 2 doubles (partials, carried mean,
// counter); cell (step, g) at ((step * kv_layer_heads + g) * (MAX + 2)). Counters start at 0 (the
// runners zero the scratch) and the last block resets its counter.
//
// Layer entries (the layer_weight program, KVEVICT_STAGED_LAYER_ENTRY / KVEVICT_LAYER_ENTRY): the
// program reads every KV head of the layer (axis g). `args.layer_heads` points at n_kv_heads
// argument sets, one per KV head g (its signals, kv_head = g, the layer's scalars and `budget`),
// each with the same layer_heads, n_kv_heads and scratch; a function of the generated code at
// head g takes head g's set (kv_head_args). Stage slots then cover (g, h, q, c):
// k = ((g * group + h) * Wp + q) * Cp + c, kv_layer_heads(args) * group * Wp * Cp slots per stage.
//   CUDA: extern "C" __global__ void NAME(KvScoreArgs args, float* out)   one thread writes out[0]
//         NAME_stages as above, over the (g, h, q, c) slots (args.layer_heads in device memory)
//   host: extern "C" void NAME(const KvScoreArgs* args, float* out)   copies the head sets (its own
//         scratch), runs the stages, writes out[0]; n_kv_heads < 1 or no layer_heads: NaN.
//
// Matrix stages (inverse(M), dsl/matrix_ops.h): a stage whose value is a d x d matrix per (h?, q?).
// It is one of the n_stages stages (same launch, in node order); its block for slot (h, q, c = 0)
// fills the operand M (the lanes split the head_dim^2 entries), then lane 0 factorises it with
// kv_spd_inverse, the interpreter's own macro text. After the n_stages float slots (rounded up to
// an even count, so doubles are aligned) the scratch holds, for the program's n_matrices matrix
// stages, KVEVICT_DEFINE_SCRATCH_LAYOUT below:
//   outputs  n_matrices * count * head_dim^2 floats (matrix k, slot m at out(k) + m * head_dim^2)
//   operand  count * head_dim^2 floats             (shared by the matrix stages: they run in turn)
//   work     count * head_dim^2 doubles            (the Cholesky factor, shared likewise)
// count = (axes & 1 ? group : 1) * (axes & 2 ? max(W, 1) : 1), where `axes` is the union over the
// program's matrices of 1 (the matrix has axis h) and 2 (axis q); a matrix's slot is
// (h if it has h) * (axes & 2 ? max(W, 1) : 1) + (q if it has q). head_dim must be in
// 1 .. dsl::kMaxMatrixDim: the runners check it before allocating (the stage writes nothing otherwise).
#include <string>
#include <vector>

#include "core/engine/signals.h"

// Split stages (below): at most this many parts per reduction; the split area's cells hold this
// many partial sums, the carried mean and the counter.
#define KVEVICT_MAX_STAGE_PARTS 128

#define KVEVICT_DEFINE_KERNEL_ABI                                           \
  struct KvScoreArgs {                                                      \
    int layer; int kv_head; int n_layers; int n_kv_heads; int group;        \
    int head_dim; int T; int prompt_len; int decode_step; int W;            \
    int n_embd; float budget;                                               \
    const float* tensor[KVEVICT_NUM_TENSOR_SIGNALS];                        \
    const int* position;                                                    \
    unsigned long long seed;                                                \
    float* scratch;                                                         \
    const KvScoreArgs* layer_heads;                                         \
  };

// The scratch extents, in floats, shared by the kernel text (pasted into the prelude) and the
// runners that allocate the scratch (compiled in namespace kvevict::jit). No comments inside.
#define KVEVICT_DEFINE_SCRATCH_LAYOUT(FN)                                                                    \
  FN long long kv_nonneg(int x) { return x > 0 ? (long long)x : 0; }                                     \
  FN int kv_stage_wp(const KvScoreArgs& a) { return a.W > 0 ? a.W : 1; }                                 \
  FN int kv_stage_cp(const KvScoreArgs& a) { return a.head_dim > 0 ? a.head_dim : 1; }                   \
  FN int kv_layer_heads(const KvScoreArgs& a) { return a.layer_heads ? (a.n_kv_heads > 0 ? a.n_kv_heads : 0) : 1; } \
  FN long kv_stage_head_slots(const KvScoreArgs& a) { return (long)kv_nonneg(a.group) * kv_stage_wp(a) * kv_stage_cp(a); } \
  FN long kv_stage_slots(const KvScoreArgs& a) { return (long)kv_layer_heads(a) * kv_stage_head_slots(a); } \
  FN long long kv_even(long long x) { return x + (x & 1); }                                              \
  FN long long kv_matrix_count(const KvScoreArgs& a, int axes) {                                         \
    return ((axes & 1) ? kv_nonneg(a.group) : 1LL) * ((axes & 2) ? (long long)kv_stage_wp(a) : 1LL);     \
  }                                                                                                      \
  FN long long kv_matrix_size(const KvScoreArgs& a) { return kv_nonneg(a.head_dim) * kv_nonneg(a.head_dim); } \
  FN long long kv_matrix_out(const KvScoreArgs& a, int n_stages, int axes, int k) {                      \
    return kv_even((long long)n_stages * kv_stage_slots(a)) + (long long)k * kv_matrix_count(a, axes) * kv_matrix_size(a); \
  }                                                                                                      \
  FN long long kv_matrix_operand(const KvScoreArgs& a, int n_stages, int n_matrices, int axes) {         \
    return kv_matrix_out(a, n_stages, axes, n_matrices);                                                 \
  }                                                                                                      \
  FN long long kv_matrix_work(const KvScoreArgs& a, int n_stages, int n_matrices, int axes) {            \
    return kv_even(kv_matrix_operand(a, n_stages, n_matrices, axes) + kv_matrix_count(a, axes) * kv_matrix_size(a)); \
  }                                                                                                      \
  FN long long kv_stage_floats(const KvScoreArgs& a, int n_stages, int n_matrices, int axes) {           \
    if (n_matrices <= 0) return (long long)n_stages * kv_stage_slots(a);                                 \
    return kv_matrix_work(a, n_stages, n_matrices, axes) + 2 * kv_matrix_count(a, axes) * kv_matrix_size(a); \
  }                                                                                                      \
  FN long long kv_split_base(const KvScoreArgs& a, int n_stages, int n_matrices, int axes) {             \
    return kv_even(kv_stage_floats(a, n_stages, n_matrices, axes));                                      \
  }                                                                                                      \
  FN long long kv_scratch_floats(const KvScoreArgs& a, int n_stages, int n_matrices, int axes) {         \
    return kv_split_base(a, n_stages, n_matrices, axes) +                                                \
           2LL * n_stages * kv_layer_heads(a) * (KVEVICT_MAX_STAGE_PARTS + 2);                           \
  }

namespace kvevict {
struct ScoreInputs;
struct LayerWeightInputs;
}

namespace kvevict::jit {

KVEVICT_DEFINE_KERNEL_ABI

static_assert(sizeof(KvScoreArgs) == 48 + kNumTensorSignals * 8 + 8 + 8 + 8 + 8, "KvScoreArgs layout must match the kernel text");
static_assert(sizeof(KvScoreArgs::tensor) / sizeof(KvScoreArgs::tensor[0]) == kNumTensorSignals);

KVEVICT_DEFINE_SCRATCH_LAYOUT(inline)

// The matrix stages of one generated program (see "Matrix stages" above).
struct MatrixScratch {
  int count = 0;  // matrix stages (inverse() nodes computed into the scratch)
  int axes = 0;   // 1: some matrix has axis h; 2: some matrix has axis q
};

// The output axis of an entry: what one thread computes and how many of them there are. Token:
// the score programs (score, decode_score), out[t] for t < T, NaN written as -inf (never outranks
// a real score). Channel: the channel_score program (core/engine/channel_selection.h), out[c] for
// c < head_dim, NaN kept (the channel selection ranks it lowest, as it does the interpreter's).
// Layer: the layer_weight program (KVEVICT_LAYER_ENTRY below), one value per layer, out[0], from
// the argument sets of every KV head of the layer (KvScoreArgs::layer_heads); NaN kept (the
// caller maps it to "no weight" as the interpreter's caller does).
enum class KernelOutput { Token, Channel, Layer };
struct KernelOutputInfo {
  KernelOutput id;
  unsigned axis;             // the output's axis bit (signals.h), the only axis its value may have
  const char* element;       // suffix of the element function, `<prefix>_token(a, t)` / `<prefix>_channel(a, c)`
  const char* entry;         // the prelude's entry macro for a program without stages
  const char* staged_entry;  // ... with stages
  bool nan_to_minus_inf;
  const char* shape_rule;    // the generator's refusal of another output shape ("<rule>, not [h]")
};
inline constexpr KernelOutputInfo kKernelOutputTable[] = {
    {KernelOutput::Token, kAxisT, "token", "KVEVICT_SCORE_ENTRY", "KVEVICT_STAGED_SCORE_ENTRY", true,
     "a score must be per token or a scalar"},
    {KernelOutput::Channel, kAxisD, "channel", "KVEVICT_CHANNEL_ENTRY", "KVEVICT_STAGED_CHANNEL_ENTRY", false,
     "a channel score must be per key channel or a scalar"},
    {KernelOutput::Layer, 0u, "value", "KVEVICT_LAYER_ENTRY", "KVEVICT_STAGED_LAYER_ENTRY", false,
     "a layer weight must be a scalar"},
};
static_assert(sizeof(kKernelOutputTable) / sizeof(kKernelOutputTable[0]) == 3 &&
                  kKernelOutputTable[int(KernelOutput::Token)].id == KernelOutput::Token &&
                  kKernelOutputTable[int(KernelOutput::Channel)].id == KernelOutput::Channel &&
                  kKernelOutputTable[int(KernelOutput::Layer)].id == KernelOutput::Layer,
              "one row per KernelOutput, in enum order");
constexpr const KernelOutputInfo& kernel_output_info(KernelOutput o) { return kKernelOutputTable[int(o)]; }

// Elements an entry writes (the threads of its token/channel launch): T or head_dim, 0 if
// negative; a layer entry writes one value.
inline long long kernel_output_extent(const KvScoreArgs& a, KernelOutput o) {
  if (o == KernelOutput::Layer) return 1;
  return kv_nonneg(o == KernelOutput::Token ? a.T : a.head_dim);
}

// Threads per block of a stage kernel (a power of two; the prelude's block reductions assume it).
inline constexpr unsigned kStageThreads = 256;
// The most blocks a stage launch takes (KVEVICT_STAGE_KERNEL loops over the slots past it): a few
// waves of resident blocks on the largest devices. Uncapped, CAKE's layer weight on 8 KV heads x
// G = 4 x W = 32 x head_dim 128 launched 131,072 blocks per stage for 128 working ones. Prime, so
// that the working slots of a value without an axis (multiples of head_dim, or of W x head_dim:
// powers of two) fall on distinct blocks instead of piling onto the few a power-of-two cap gives.
inline constexpr long kStageMaxBlocks = 4093;
// The grid of a stage launch over `slots` slots.
inline unsigned stage_grid_blocks(long slots) {
  return unsigned(slots < 0 ? 0 : (slots < kStageMaxBlocks ? slots : kStageMaxBlocks));
}
// The most blocks a split stage's reduction is spread over (see "Split stages" above).
inline constexpr int kMaxStageParts = KVEVICT_MAX_STAGE_PARTS;
// A split stage's parts of one cell are consecutive slots (P <= kMaxStageParts), so with the cap
// above each runs in a block of its own, in parallel (the point of splitting). Parts of different
// cells (a value with a g axis in a layer program) may share a block's loop: each call's
// kv_block_combine barrier comes before kv_parts_combine re-arms its shared flag, and no part waits
// for another (the last to arrive combines).
static_assert(kMaxStageParts <= kStageMaxBlocks, "a split stage's parts run in parallel blocks");

// Copies the scalars of `in`; the pointers are copied as they are (host pointers): callers that
// launch on a GPU replace them with device addresses. `scratch` is null.
KvScoreArgs to_kernel_args(const ScoreInputs& in);

// `in` as a kernel of a program that reads `reads` is handed it: every signal the program does not
// read null (its device mark cleared), and no positions (host or device) unless it reads `pos` or
// random() (whose key they are: dsl/program_builder.cpp marks Position for both). A runner uploads nothing it is
// not handed, so a signal gathered for another program of the policy (CAKE's layer weight reads A
// alone; every head's positions were uploaded for it) or positions nobody reads cost no copy.
// The host backend takes the same inputs, so the comparisons with the interpreter prove `reads`
// complete: a read it missed would load null, or take the slot index for a position.
ScoreInputs inputs_read_by(const ScoreInputs& in, const SignalSet& reads);

// The argument sets of a layer_weight kernel, one per KV head g of `in` (kernel_abi.h, "Layer
// entries"): head g's signals and seed, kv_head = g, the layer's scalars (layer, n_layers,
// prompt_len, n_kv_heads = the number of heads, budget) and head 0's others (T, W, group,
// head_dim, decode_step, n_embd), as the interpreter reads them. layer_heads and scratch are
// null: the runner sets them (host pointers stay host pointers).
std::vector<KvScoreArgs> layer_kernel_args(const LayerWeightInputs& in);

// The text every kernel source starts with: portability macros (CUDA under NVRTC, plain C++ for
// the host semantic check), KvScoreArgs, bounded loads and KVEVICT_SCORE_ENTRY.
const std::string& kernel_prelude();

}  // namespace kvevict::jit
