// The kernel prelude; see kernel_abi.h.
#include "jit/kernel_abi.h"

#include "core/engine/counter_rng.h"
#include "core/engine/gaussian_rng.h"
#include "dsl/matrix_ops.h"
#include "dsl/sort_ops.h"
#include "core/engine/policy_program.h"

#include <string>
#include <type_traits>

#define KVEVICT_STRINGIFY2(...) #__VA_ARGS__
#define KVEVICT_STRINGIFY(...) KVEVICT_STRINGIFY2(__VA_ARGS__)

namespace kvevict::jit {

// Every head scalar of the signal table is a field of both structs, of the same type.
#define KVEVICT_CHECK_MIRRORED(name, dsl, field)                                          \
  static_assert(std::is_same_v<decltype(KvScoreArgs::field), decltype(ScoreInputs::field)>, \
                "KvScoreArgs::" #field " must mirror ScoreInputs::" #field);
KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_CHECK_MIRRORED)
#undef KVEVICT_CHECK_MIRRORED

KvScoreArgs to_kernel_args(const ScoreInputs& in) {
  KvScoreArgs args{};
#define KVEVICT_COPY_SCALAR(name, dsl, field) args.field = in.field;
  KVEVICT_HEAD_SCALAR_SIGNALS(KVEVICT_COPY_SCALAR)
#undef KVEVICT_COPY_SCALAR
  for (int s = 0; s < kNumTensorSignals; ++s) args.tensor[s] = in.tensor[s];
  args.position = in.position;
  args.seed = in.seed;
  return args;
}

ScoreInputs inputs_read_by(const ScoreInputs& in, const SignalSet& reads) {
  ScoreInputs out = in;
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    const size_t s = signal_index(info.id);
    if (reads[s]) continue;
    out.tensor[s] = nullptr;
    out.device_signals &= ~(1u << s);
  }
  if (!reads[signal_index(TensorSignal::Position)]) out.position = out.device_position = nullptr;
  return out;
}

std::vector<KvScoreArgs> layer_kernel_args(const LayerWeightInputs& in) {
  std::vector<KvScoreArgs> heads;
  if (in.heads.empty()) return heads;
  const KvScoreArgs first = to_kernel_args(in.heads[0]);
  for (size_t g = 0; g < in.heads.size(); ++g) {
    KvScoreArgs args = first;  // head 0's scalars, as the interpreter's fill_scalars(h0)
    const KvScoreArgs own = to_kernel_args(in.heads[g]);
    for (int s = 0; s < kNumTensorSignals; ++s) args.tensor[s] = own.tensor[s];
    args.position = own.position;
    args.seed = own.seed;
    args.kv_head = int(g);
    args.layer = in.layer;
    args.n_layers = in.n_layers;
    args.prompt_len = in.prompt_len;
    args.n_kv_heads = int(in.heads.size());
    args.budget = float(in.budget);
    heads.push_back(args);
  }
  return heads;
}

const std::string& kernel_prelude() {
  // Why the host branch exists: the semantic check compiles the very same kernel text with the
  // system C++ compiler (no GPU needed) and compares it with the interpreter.
  static const std::string text = std::string(R"(// ---- kvevict kernel prelude ----
#define KVEVICT_STAGE_THREADS )" + std::to_string(kStageThreads) + R"(u
#define KVEVICT_MAX_MATRIX_DIM )" + std::to_string(dsl::kMaxMatrixDim) + R"(
#define KVEVICT_MAX_STAGE_PARTS )" + std::to_string(kMaxStageParts) + R"(
#if defined(__CUDACC__)
#define KVEVICT_FN static __device__ __forceinline__
#define KVEVICT_TABLE static __device__ const float
#define KVEVICT_LOADED_TABLE(name, n) extern "C" { __device__ float name[n]; }
#define KVEVICT_INFINITY __int_as_float(0x7f800000)
KVEVICT_FN float kv_from_bits(unsigned bits) { return __uint_as_float(bits); }
// One thread per output element: a token (KVEVICT_SCORE_ENTRY, extent T) or a key channel
// (KVEVICT_CHANNEL_ENTRY, extent head_dim); `extent` names the KvScoreArgs field.
#define KVEVICT_ENTRY_OVER(entry, element_fn, extent)                              \
  extern "C" __global__ void entry(KvScoreArgs args, float* out) {               \
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);                    \
    if (i < args.extent) out[i] = element_fn(args, i);                           \
  }
// Stages: a block per scratch slot (looping when the slots outnumber the capped grid); the
// block's threads split the tokens (lanes).
#define KVEVICT_LANE ((int)threadIdx.x)
#define KVEVICT_LANES ((int)blockDim.x)
#define KVEVICT_SYNC() __syncthreads()
// Slot k = (g, h, q, c): g only in a layer_weight kernel (args.layer_heads set), whose stage runs
// on KV head g's arguments. Block b takes slots b, b + gridDim.x, ... (the grid is capped at
// kStageMaxBlocks: a stage whose value lacks an axis leaves most slots idle, and they return at
// once in this loop instead of costing a block each). The loop is block-uniform, and every early
// return of a stage function comes before its first barrier, so every thread runs each slot.
#define KVEVICT_STAGE_KERNEL(entry, stage_fn)                                      \
  extern "C" __global__ void entry##_stages(KvScoreArgs args, int stage) {       \
    if (blockDim.x != KVEVICT_STAGE_THREADS || blockDim.y != 1 || blockDim.z != 1) return; \
    const int wp = kv_stage_wp(args), cp = kv_stage_cp(args);                   \
    const long slots = kv_stage_slots(args), per_head = kv_stage_head_slots(args); \
    for (long k = (long)blockIdx.x; k < slots; k += (long)gridDim.x) {           \
      const int g = int(k / per_head), slot = int(k % per_head);                 \
      stage_fn(kv_head_args(args, g), stage, slot / (wp * cp), (slot / cp) % wp, slot % cp); \
    }                                                                            \
  }
#define KVEVICT_STAGED_ENTRY_OVER(entry, element_fn, extent, stage_fn, n_stages, n_matrices, matrix_axes) \
  KVEVICT_ENTRY_OVER(entry, element_fn, extent)                                  \
  KVEVICT_STAGE_KERNEL(entry, stage_fn)
// A layer_weight kernel: stages over (g, h, q, c) slots, then one thread writes the layer's value.
#define KVEVICT_STAGED_LAYER_ENTRY(entry, value_fn, stage_fn, n_stages, n_matrices, matrix_axes) \
  extern "C" __global__ void entry(KvScoreArgs args, float* out) {               \
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = value_fn(kv_head_args(args, 0)); \
  }                                                                              \
  KVEVICT_STAGE_KERNEL(entry, stage_fn)
#else
#include <math.h>
#include <string.h>
#define KVEVICT_FN static inline
#define KVEVICT_TABLE static const float
#define KVEVICT_LOADED_TABLE(name, n) extern "C" { float name[n]; }
#define KVEVICT_INFINITY INFINITY
KVEVICT_FN float kv_from_bits(unsigned bits) { float f; memcpy(&f, &bits, sizeof f); return f; }
#define KVEVICT_ENTRY_OVER(entry, element_fn, extent)                              \
  extern "C" void entry(const KvScoreArgs* args, float* out) {                   \
    for (int i = 0; i < args->extent; ++i) out[i] = element_fn(*args, i);        \
  }
// Stages on the host: one lane does every token, slots and stages run in order, then the outputs.
// The scratch is raw zeroed bytes (floats and the matrix stages' doubles live in it). A matrix
// stage with head_dim outside 1 .. KVEVICT_MAX_MATRIX_DIM allocates nothing: every output is -inf.
#include <memory>
#define KVEVICT_LANE 0
#define KVEVICT_LANES 1
#define KVEVICT_SYNC() ((void)0)
#define KVEVICT_STAGED_ENTRY_OVER(entry, element_fn, extent, stage_fn, n_stages, n_matrices, matrix_axes) \
  extern "C" void entry(const KvScoreArgs* args, float* out) {                   \
    KvScoreArgs a = *args;                                                       \
    if (n_matrices > 0 && (a.head_dim < 1 || a.head_dim > KVEVICT_MAX_MATRIX_DIM)) { \
      for (int i = 0; i < a.extent; ++i) out[i] = -KVEVICT_INFINITY;             \
      return;                                                                    \
    }                                                                            \
    const long slots = kv_stage_slots(a);                                        \
    const long long floats = kv_scratch_floats(a, n_stages, n_matrices, matrix_axes); \
    std::unique_ptr<unsigned char[]> bytes(new unsigned char[(size_t)(floats > 0 ? floats : 1) * sizeof(float)]()); \
    a.scratch = reinterpret_cast<float*>(bytes.get());                           \
    for (int s = 0; s < n_stages; ++s)                                           \
      for (long k = 0; k < slots; ++k)                                           \
        stage_fn(a, s, int(k / ((long)kv_stage_wp(a) * kv_stage_cp(a))), int((k / kv_stage_cp(a)) % kv_stage_wp(a)), \
                 int(k % kv_stage_cp(a)));                                       \
    for (int i = 0; i < a.extent; ++i) out[i] = element_fn(a, i);                \
  }
// A layer_weight kernel on the host: args->layer_heads holds n_kv_heads argument sets (one per KV
// head); they are copied with the scratch and the copy's own address filled in, the stages run
// over every (g, h, q, c) slot on head g's arguments, then the value. No heads: NaN (no weight).
#define KVEVICT_STAGED_LAYER_ENTRY(entry, value_fn, stage_fn, n_stages, n_matrices, matrix_axes) \
  extern "C" void entry(const KvScoreArgs* args, float* out) {                   \
    const int n = args->layer_heads && args->n_kv_heads > 0 ? args->n_kv_heads : 0; \
    if (n == 0) { out[0] = 0.0f / 0.0f; return; }                                \
    std::unique_ptr<KvScoreArgs[]> heads(new KvScoreArgs[n]);                    \
    for (int g = 0; g < n; ++g) heads[g] = args->layer_heads[g], heads[g].layer_heads = heads.get(), heads[g].n_kv_heads = n; \
    const long long floats = kv_scratch_floats(heads[0], n_stages, 0, 0);        \
    std::unique_ptr<float[]> scratch(new float[(size_t)(floats > 0 ? floats : 1)]()); \
    for (int g = 0; g < n; ++g) heads[g].scratch = scratch.get();                \
    const long per_head = kv_stage_head_slots(heads[0]);                         \
    const long wpcp = (long)kv_stage_wp(heads[0]) * kv_stage_cp(heads[0]);       \
    for (int s = 0; s < n_stages; ++s)                                           \
      for (int g = 0; g < n; ++g)                                                \
        for (long k = 0; k < per_head; ++k)                                      \
          stage_fn(heads[g], s, int(k / wpcp), int((k / kv_stage_cp(heads[0])) % kv_stage_wp(heads[0])), \
                   int(k % kv_stage_cp(heads[0])));                               \
    out[0] = value_fn(heads[0]);                                                 \
  }
#endif
// A layer_weight program without stages: the same entry with a stage that does nothing.
#define KVEVICT_LAYER_ENTRY(entry, value_fn) KVEVICT_STAGED_LAYER_ENTRY(entry, value_fn, kv_no_stage, 0, 0, 0)
// The entries by output axis (kernel_abi.h, KernelOutput): tokens (score programs) and key
// channels (channel_score).
#define KVEVICT_SCORE_ENTRY(entry, token_score) KVEVICT_ENTRY_OVER(entry, token_score, T)
#define KVEVICT_CHANNEL_ENTRY(entry, channel_score) KVEVICT_ENTRY_OVER(entry, channel_score, head_dim)
#define KVEVICT_STAGED_SCORE_ENTRY(entry, token_score, stage_fn, n_stages, n_matrices, matrix_axes) \
  KVEVICT_STAGED_ENTRY_OVER(entry, token_score, T, stage_fn, n_stages, n_matrices, matrix_axes)
#define KVEVICT_STAGED_CHANNEL_ENTRY(entry, channel_score, stage_fn, n_stages, n_matrices, matrix_axes) \
  KVEVICT_STAGED_ENTRY_OVER(entry, channel_score, head_dim, stage_fn, n_stages, n_matrices, matrix_axes)
)") + KVEVICT_STRINGIFY(KVEVICT_DEFINE_KERNEL_ABI) + R"(
// Every buffer access of a generated kernel goes through kv_load / kv_load_int / kv_store with the
// buffer's extent computed from the scalars of KvScoreArgs (kv_extent_*): an index outside [0, n),
// a null buffer or a negative extent reads the padding value and writes nothing, so no kernel can
// leave its buffers whatever its program computes. Indices and extents are 64-bit: no overflow.
KVEVICT_FN float kv_load(const float* p, long long i, long long n, float pad) { return (p && i >= 0 && i < n) ? p[i] : pad; }
KVEVICT_FN int kv_load_int(const int* p, long long i, long long n, int pad) { return (p && i >= 0 && i < n) ? p[i] : pad; }
KVEVICT_FN void kv_store(float* p, long long i, long long n, float v) { if (p && i >= 0 && i < n) p[i] = v; }
// Extents (in elements) of the buffers of KvScoreArgs, from its own scalars (kernel_abi.h), and
// the scratch layout of stages and matrix stages, the same text the runners compile.
)" + KVEVICT_STRINGIFY(KVEVICT_DEFINE_SCRATCH_LAYOUT(KVEVICT_FN)) + R"(
KVEVICT_FN long long kv_extent_tokens(const KvScoreArgs& a) { return kv_nonneg(a.T); }
// KV head g's arguments in a layer_weight kernel (axis g; kv_layer_heads(a) of them); `a` itself
// in a per-head kernel, whose only head is g = 0.
KVEVICT_FN const KvScoreArgs& kv_head_args(const KvScoreArgs& a, int g) { return a.layer_heads ? a.layer_heads[g] : a; }
KVEVICT_FN void kv_no_stage(const KvScoreArgs&, int, int, int, int) {}
// A signal buffer with axes [h?, q?, d?, e?, t?] (core/engine/signals.h): the product of their
// extents; channels = the number of channel axes (0, 1 or 2: d and e, each head_dim).
KVEVICT_FN long long kv_extent_axes(const KvScoreArgs& a, int has_h, int has_q, int channels, int has_t) {
  const long long hd = kv_nonneg(a.head_dim);
  return (has_h ? kv_nonneg(a.group) : 1LL) * (has_q ? kv_nonneg(a.W) : 1LL) * (channels == 2 ? hd * hd : channels ? hd : 1LL) *
         (has_t ? kv_nonneg(a.T) : 1LL);
}
// The DSL's random(): kvevict's one generator, Philox4x32-10 (core/engine/counter_rng.h),
// pasted from the same macro the CPU side compiles, so both agree bit for bit.
)" + KVEVICT_STRINGIFY(KVEVICT_DEFINE_PHILOX(KVEVICT_FN)) + R"(
KVEVICT_FN float kv_random(const KvScoreArgs& a, int t) {
  const unsigned position = (unsigned)(a.position ? kv_load_int(a.position, t, kv_extent_tokens(a), t) : t);
  return kv_dsl_random(a.seed, (unsigned)a.layer, (unsigned)a.kv_head, position);
}
// randn[d, e] (core/engine/gaussian_rng.h) and inverse() (dsl/matrix_ops.h): the same macro text
// the CPU side compiles.
)" + KVEVICT_STRINGIFY(KVEVICT_DEFINE_GAUSSIAN(KVEVICT_FN)) + R"(
)" + KVEVICT_STRINGIFY(KVEVICT_DEFINE_SPD_INVERSE(KVEVICT_FN)) + R"(
// rank / sorted_cumsum's order (dsl/sort_ops.h), the same macro text the interpreter compiles.
)" + KVEVICT_STRINGIFY(KVEVICT_DEFINE_SORT_BEFORE(KVEVICT_FN)) + R"(
// Stage slots (kernel_abi.h, kv_stage_slots above): group * max(W, 1) * max(head_dim, 1) per
// stage, slot (h * max(W, 1) + q) * max(head_dim, 1) + c.
// One double per lane combined into one value for the block (op 0 sum, 1 max, 2 min). On the GPU
// every thread of the block must call it and gets the result; the tree has a fixed shape, so a
// given launch always gives the same bits. On the host there is one lane: the value itself.
KVEVICT_FN double kv_combine_op(double x, double y, int op) { return op == 0 ? x + y : op == 1 ? (y > x ? y : x) : (y < x ? y : x); }
#if defined(__CUDACC__)
KVEVICT_FN double kv_block_combine(double v, int op) {
  __shared__ double buffer[KVEVICT_STAGE_THREADS];
  const int lane = (int)threadIdx.x;
  buffer[lane] = v;
  __syncthreads();
  for (int half = (int)blockDim.x / 2; half > 0; half /= 2) {
    if (lane < half) {
      const double x = buffer[lane], y = buffer[lane + half];
      buffer[lane] = kv_combine_op(x, y, op);
    }
    __syncthreads();
  }
  const double result = buffer[0];
  __syncthreads();  // the buffer is reused by the next call
  return result;
}
#else
KVEVICT_FN double kv_block_combine(double v, int) { return v; }
#endif
// Split stages (kernel_abi.h): the parts of a reduction, their cells and the last block's combine.
#if defined(__CUDACC__)
#define KVEVICT_STAGE_PARTS KVEVICT_MAX_STAGE_PARTS
#else
#ifndef KVEVICT_HOST_STAGE_PARTS
#define KVEVICT_HOST_STAGE_PARTS 1
#endif
#define KVEVICT_STAGE_PARTS KVEVICT_HOST_STAGE_PARTS
#endif
KVEVICT_FN int kv_stage_parts(const KvScoreArgs& a) {
  long p = KVEVICT_STAGE_PARTS > KVEVICT_MAX_STAGE_PARTS ? KVEVICT_MAX_STAGE_PARTS : KVEVICT_STAGE_PARTS;
  const long n = kv_stage_head_slots(a);
  if (p > n) p = n;
  return p < 1 ? 1 : (int)p;
}
KVEVICT_FN double* kv_split_cell(const KvScoreArgs& a, int n_stages, int n_matrices, int axes, int step, int g) {
  if (!a.scratch || step < 0 || step >= n_stages || g < 0 || g >= kv_layer_heads(a)) return 0;
  return (double*)(a.scratch + kv_split_base(a, n_stages, n_matrices, axes)) +
         ((long long)step * kv_layer_heads(a) + g) * (KVEVICT_MAX_STAGE_PARTS + 2);
}
// Every thread of the block calls it with the block's value v (op as kv_block_combine). Part
// `part` of `parts` stores v; the last block to arrive gets true and v = the parts combined in part
// order; the others get false and stop.
#if defined(__CUDACC__)
KVEVICT_FN bool kv_parts_combine(double* cell, int part, int parts, double& v, int op) {
  __shared__ int last;
  unsigned* counter = (unsigned*)(cell + KVEVICT_MAX_STAGE_PARTS + 1);
  if (threadIdx.x == 0) {
    cell[part] = v;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(counter, 1u) == (unsigned)(parts - 1);
  }
  __syncthreads();
  if (!last) return false;
  __threadfence();
  const volatile double* partials = cell;
  double r = partials[0];
  for (int k = 1; k < parts; ++k) r = kv_combine_op(r, partials[k], op);
  __syncthreads();
  if (threadIdx.x == 0) *counter = 0u;  // ready for the next launch
  v = r;
  return true;
}
#else
KVEVICT_FN bool kv_parts_combine(double* cell, int part, int parts, double& v, int op) {
  unsigned* counter = (unsigned*)(cell + KVEVICT_MAX_STAGE_PARTS + 1);
  cell[part] = v;
  if (++*counter != (unsigned)parts) return false;  // blocks run in order: part parts - 1 is last
  *counter = 0u;
  double r = cell[0];
  for (int k = 1; k < parts; ++k) r = kv_combine_op(r, cell[k], op);
  v = r;
  return true;
}
#endif
// ---- end of prelude ----
)";
  return text;
}

}  // namespace kvevict::jit
