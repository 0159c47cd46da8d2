#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11), header-only and usable from
// CUDA (__host__ __device__ when compiled by nvcc). A draw is a pure function of (seed, layer,
// kv_head, position): no state, no order dependence, so the CPU engine and a GPU kernel that
// evaluate the same tuple get bit-identical 32-bit words and therefore the same uniform floats.
//   counter = (position, kv_head, layer, stream), key = (seed low 32 bits, seed high 32 bits)
// `stream` separates independent uses: kSamplingStream for the engine's random share (NACL),
// kScoreStream for the DSL's `random()` score (the Random policy).
#include <cstdint>

#if defined(__CUDACC__)
#define KVEVICT_HOST_DEVICE __host__ __device__
#else
#define KVEVICT_HOST_DEVICE
#endif

namespace kvevict {

inline constexpr uint32_t kSamplingStream = 0;
inline constexpr uint32_t kScoreStream = 1;

struct Philox4x32 {
  uint32_t v[4];
};

KVEVICT_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds.
KVEVICT_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kM0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(kM1, ctr.v[2], &hi1, &lo1);
    Philox4x32 next;
    next.v[0] = hi1 ^ ctr.v[1] ^ key0;
    next.v[1] = lo1;
    next.v[2] = hi0 ^ ctr.v[3] ^ key1;
    next.v[3] = lo0;
    ctr = next;
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// Uniform in the open interval (0, 1) with 24 random bits (exact in float, so CPU and GPU agree).
KVEVICT_HOST_DEVICE inline float uniform_open01(uint32_t word) {
  return (static_cast<float>(word >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// The uniform draw for one cache entry.
KVEVICT_HOST_DEVICE inline float counter_uniform(uint64_t seed, int layer, int kv_head, int32_t position,
                                                 uint32_t stream = 0) {
  Philox4x32 ctr;
  ctr.v[0] = static_cast<uint32_t>(position);
  ctr.v[1] = static_cast<uint32_t>(kv_head);
  ctr.v[2] = static_cast<uint32_t>(layer);
  ctr.v[3] = stream;
  const Philox4x32 r = philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return uniform_open01(r.v[0]);
}

}  // namespace kvevict
