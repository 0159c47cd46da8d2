// The kernel prelude; see kernel_abi.h.
#include "jit/kernel_abi.h"

#include "core/engine/policy_program.h"

#define KVEVICT_STRINGIFY2(...) #__VA_ARGS__
#define KVEVICT_STRINGIFY(...) KVEVICT_STRINGIFY2(__VA_ARGS__)

namespace kvevict::jit {

KvScoreArgs to_kernel_args(const ScoreInputs& in) {
  KvScoreArgs args{};
  args.layer = in.layer;
  args.kv_head = in.kv_head;
  args.n_layers = in.n_layers;
  args.n_kv_heads = in.n_kv_heads;
  args.group = in.group;
  args.head_dim = in.head_dim;
  args.T = in.T;
  args.prompt_len = in.prompt_len;
  args.decode_step = in.decode_step;
  args.W = in.W;
  args.window_attention = in.window_attention;
  args.accumulated_attention = in.accumulated_attention;
  args.current_attention = in.current_attention;
  args.key_norm = in.key_norm;
  args.value_norm = in.value_norm;
  args.position = in.position;
  args.seed = in.seed;
  return args;
}

const std::string& kernel_prelude() {
  // Why the host branch exists: the semantic check compiles the very same kernel text with the
  // system C++ compiler (no GPU needed) and compares it with the interpreter.
  static const std::string text = std::string(R"(// ---- kvevict kernel prelude ----
#if defined(__CUDACC__)
#define KVEVICT_FN static __device__ __forceinline__
#define KVEVICT_INFINITY __int_as_float(0x7f800000)
KVEVICT_FN float kv_from_bits(unsigned bits) { return __uint_as_float(bits); }
#define KVEVICT_SCORE_ENTRY(entry, token_score)                                   \
  extern "C" __global__ void entry(KvScoreArgs args, float* out) {               \
    const int t = int(blockIdx.x * blockDim.x + threadIdx.x);                    \
    if (t < args.T) out[t] = token_score(args, t);                               \
  }
#else
#include <math.h>
#include <string.h>
#define KVEVICT_FN static inline
#define KVEVICT_INFINITY INFINITY
KVEVICT_FN float kv_from_bits(unsigned bits) { float f; memcpy(&f, &bits, sizeof f); return f; }
#define KVEVICT_SCORE_ENTRY(entry, token_score)                                   \
  extern "C" void entry(const KvScoreArgs* args, float* out) {                   \
    for (int t = 0; t < args->T; ++t) out[t] = token_score(*args, t);            \
  }
#endif
)") + KVEVICT_STRINGIFY(KVEVICT_DEFINE_KERNEL_ABI) + R"(
// Reads outside [0, n) yield the padding value: no kernel can leave its buffer.
KVEVICT_FN float kv_load(const float* p, int i, int n, float pad) { return (i >= 0 && i < n) ? p[i] : pad; }
// The DSL's random() (dsl/random.h): SplitMix64-based, a pure function of
// (seed, layer, kv_head, position), identical on both sides.
KVEVICT_FN unsigned long long kv_splitmix64(unsigned long long z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
KVEVICT_FN float kv_random(const KvScoreArgs& a, int t) {
  const unsigned long long key =
      kv_splitmix64(kv_splitmix64(kv_splitmix64(a.seed) ^ (unsigned)a.layer) ^ (unsigned)a.kv_head);
  const unsigned position = (unsigned)(a.position ? a.position[t] : t);
  return (float)(kv_splitmix64(key ^ position) >> 40) * (1.0f / 16777216.0f);
}
// ---- end of prelude ----
)";
  return text;
}

}  // namespace kvevict::jit
