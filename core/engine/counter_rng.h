#pragma once
// kvevict's one random-number generator: counter-based Philox4x32-10 (Salmon et al., SC'11),
// header-only and usable from the CPU engine, the DSL interpreter and generated CUDA kernels.
// A draw is a pure function of (seed, layer, kv_head, position, stream): no state, no order
// dependence, so every evaluator of the same tuple gets bit-identical 32-bit words and therefore
// the same uniform floats.
//   counter = (position, kv_head, layer, stream), key = (seed low 32 bits, seed high 32 bits)
//   uniform = ((word0 >> 8) + 0.5) * 2^-24          (24 bits, exact in float, open interval (0, 1))
// `stream` separates independent uses: kSamplingStream for the engine's random share (NACL),
// kScoreStream for the DSL's `random()` score (docs/DSL.md §7), kMergeStream for merge.method
// cam's Bernoulli merge gate (merge_cam.h; the position is the evicted entry's original one).
//
// The body is written once, as KVEVICT_DEFINE_PHILOX(FN), in plain C-style integer arithmetic, so
// jit/kernel_abi.cpp pastes the very same text into the kernel prelude (FN = the prelude's
// function qualifier) and generated kernels cannot drift from the CPU side.
#include <cstdint>

#include "core/util/host_device.h"

// No comments inside: the macro is also stringified into kernel source.
#define KVEVICT_DEFINE_PHILOX(FN)                                                                     \
  struct KvPhilox4x32 {                                                                              \
    unsigned v[4];                                                                                   \
  };                                                                                                 \
  FN KvPhilox4x32 kv_philox4x32_10(KvPhilox4x32 ctr, unsigned key0, unsigned key1) {                 \
    for (int round = 0; round < 10; ++round) {                                                       \
      const unsigned long long p0 = (unsigned long long)0xD2511F53u * ctr.v[0];                      \
      const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * ctr.v[2];                      \
      KvPhilox4x32 next;                                                                             \
      next.v[0] = (unsigned)(p1 >> 32) ^ ctr.v[1] ^ key0;                                            \
      next.v[1] = (unsigned)p1;                                                                      \
      next.v[2] = (unsigned)(p0 >> 32) ^ ctr.v[3] ^ key1;                                            \
      next.v[3] = (unsigned)p0;                                                                      \
      ctr = next;                                                                                    \
      key0 += 0x9E3779B9u;                                                                           \
      key1 += 0xBB67AE85u;                                                                           \
    }                                                                                                \
    return ctr;                                                                                      \
  }                                                                                                  \
  FN float kv_uniform_open01(unsigned word) { return ((float)(word >> 8) + 0.5f) * (1.0f / 16777216.0f); } \
  FN float kv_counter_uniform(unsigned long long seed, unsigned layer, unsigned kv_head, unsigned position, \
                              unsigned stream) {                                                     \
    KvPhilox4x32 ctr;                                                                                \
    ctr.v[0] = position;                                                                             \
    ctr.v[1] = kv_head;                                                                              \
    ctr.v[2] = layer;                                                                                \
    ctr.v[3] = stream;                                                                               \
    return kv_uniform_open01(kv_philox4x32_10(ctr, (unsigned)seed, (unsigned)(seed >> 32)).v[0]);   \
  }                                                                                                  \
  FN float kv_dsl_random(unsigned long long seed, unsigned layer, unsigned kv_head, unsigned position) { \
    return kv_counter_uniform(seed, layer, kv_head, position, 1u);                                   \
  }

namespace kvevict {

KVEVICT_DEFINE_PHILOX(KVEVICT_HOST_DEVICE inline)

inline constexpr uint32_t kSamplingStream = 0;
inline constexpr uint32_t kScoreStream = 1;  // kv_dsl_random's stream (the literal 1u above)
inline constexpr uint32_t kMergeStream = 2;  // merge.method cam's gate (CPU only: no kernel draws it)

using Philox4x32 = KvPhilox4x32;

// Philox4x32 with 10 rounds (Random123's philox4x32_10).
KVEVICT_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  return kv_philox4x32_10(ctr, key0, key1);
}

// Uniform in the open interval (0, 1) with 24 random bits.
KVEVICT_HOST_DEVICE inline float uniform_open01(uint32_t word) { return kv_uniform_open01(word); }

// The uniform draw for one cache entry.
KVEVICT_HOST_DEVICE inline float counter_uniform(uint64_t seed, int layer, int kv_head, int32_t position,
                                                 uint32_t stream = kSamplingStream) {
  return kv_counter_uniform(seed, static_cast<uint32_t>(layer), static_cast<uint32_t>(kv_head),
                            static_cast<uint32_t>(position), stream);
}

}  // namespace kvevict
