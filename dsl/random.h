#pragma once
// The DSL's random(): a counter-based uniform generator, a pure function of
// (seed, layer, kv_head, position). Written without library calls so that the CUDA code generator
// emits the same function (it is plain 64-bit integer arithmetic) and both sides agree bit for bit.
//
//   mix(z)  = SplitMix64 finaliser: z += 0x9E3779B97F4A7C15;
//             z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//             z ^ (z >> 31)
//   key     = mix(mix(mix(seed) ^ layer) ^ kv_head) ^ position      (layer, kv_head, position as
//                                                                    unsigned 32-bit values)
//   uniform = (mix(key) >> 40) * 2^-24                               (24 bits: exact in float, [0, 1))
#include <cstdint>

namespace kvevict::dsl {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t random_stream_key(uint64_t seed, uint32_t layer, uint32_t kv_head) {
  return splitmix64(splitmix64(splitmix64(seed) ^ layer) ^ kv_head);
}

inline float random_uniform(uint64_t stream_key, uint32_t position) {
  return static_cast<float>(splitmix64(stream_key ^ position) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace kvevict::dsl
