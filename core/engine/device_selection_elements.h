#pragma once
// Block-level building blocks of device-side selection (issue 10), written once as
// KVEVICT_HOST_DEVICE code: the CUDA kernels (core/engine/cuda/device_selection.cu) run them with
// one block per head, the CPU twin (device_selection_twin.h) runs them over an emulated block, so
// the CPU tests exercise the code the GPU runs.
//
// Execution model. A block algorithm is a driver (plain sequential code) calling
// `ex.phase(fn)`: fn(tid) runs for every thread tid in [0, kSelThreads) and the phase ends with a
// barrier. On the GPU every thread runs the driver (so its decisions must only read state that is
// uniform across the block: shared memory written in an earlier phase) and Exec::phase puts a
// barrier before fn as well, so no thread overwrites shared state another is still reading in the
// driver. The twin's Exec loops over tid. Only order-independent updates are done with atomics
// (histogram counts, claim counters), so the twin's sequential order gives the same result.
//
// Keys. Every ranking is a comparison of SelKey (hi, then lo; larger ranks first) built so that
// distinct entries of one head get distinct keys: (monotone score bits, inverted position) for the
// tie rule "higher score, then smaller position", NaN mapped below -inf and -0 folded onto +0
// (the CPU engine compares floats with ==, so -0 and +0 tie). Keys are consumed as 8-bit digits,
// most significant first: digits 0-7 are hi's bytes, 8-11 lo's bytes; a key kind uses its first
// n_digits digits only (the rest are zero).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/util/host_device.h"

namespace kvevict::devsel {

inline constexpr int kSelThreads = 256;  // threads per block (a power of two: the block scan)
inline constexpr int kSelBins = 256;     // one 8-bit digit

// Trivial (no member initialisers) so that SelShared can live in __shared__ memory; build with {}.
struct SelKey {
  uint64_t hi;
  uint32_t lo;
};
KVEVICT_HOST_DEVICE inline bool key_equal(SelKey a, SelKey b) { return a.hi == b.hi && a.lo == b.lo; }
KVEVICT_HOST_DEVICE inline bool key_greater(SelKey a, SelKey b) { return a.hi != b.hi ? a.hi > b.hi : a.lo > b.lo; }

KVEVICT_HOST_DEVICE inline unsigned key_digit(SelKey k, int d) {
  return d < 8 ? static_cast<unsigned>(k.hi >> (56 - 8 * d)) & 255u : (k.lo >> (24 - 8 * (d - 8))) & 255u;
}
// k with digits >= d zeroed: the part a radix select has fixed after d digits.
KVEVICT_HOST_DEVICE inline SelKey key_top(SelKey k, int d) {
  SelKey t{};
  t.hi = d >= 8 ? k.hi : (d == 0 ? 0 : k.hi & ~(~uint64_t{0} >> (8 * d)));
  t.lo = d <= 8 ? 0u : (d >= 12 ? k.lo : k.lo & ~(~uint32_t{0} >> (8 * (d - 8))));
  return t;
}
KVEVICT_HOST_DEVICE inline SelKey key_with_digit(SelKey k, int d, unsigned digit) {
  if (d < 8) k.hi |= static_cast<uint64_t>(digit) << (56 - 8 * d);
  else k.lo |= digit << (24 - 8 * (d - 8));
  return k;
}

// Order-preserving 32-bit image of a float under the CPU's comparison: NaN -> 0 (below -inf,
// whose image is 0x007FFFFF), -0 -> +0, otherwise larger float -> larger unsigned.
KVEVICT_HOST_DEVICE inline uint32_t score_bits(float s) {
  if (s != s) return 0u;
  if (s == 0.0f) s = 0.0f;
  uint32_t u;
  memcpy(&u, &s, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// The same for a double (Gumbel keys; a NaN cannot arise from finite temperatures but maps low).
KVEVICT_HOST_DEVICE inline uint64_t double_bits(double s) {
  if (s != s) return 0u;
  if (s == 0.0) s = 0.0;
  uint64_t u;
  memcpy(&u, &s, sizeof u);
  return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
}
// Order-preserving image of a signed position (smaller -> smaller).
KVEVICT_HOST_DEVICE inline uint32_t position_bits(int32_t p) { return static_cast<uint32_t>(p) ^ 0x80000000u; }

// The tie rule as a key: higher score first, then smaller position. 8 digits.
KVEVICT_HOST_DEVICE inline SelKey score_key(float s, int32_t p) {
  SelKey k{};
  k.hi = (static_cast<uint64_t>(score_bits(s)) << 32) | ~position_bits(p);
  return k;
}
// Ada-KV's joint ranking: the tie rule, then lower head first. 9 digits (head < 256).
KVEVICT_HOST_DEVICE inline SelKey joint_key(float s, int32_t p, int head) {
  SelKey k = score_key(s, p);
  k.lo = static_cast<uint32_t>(255 - head) << 24;
  return k;
}
// Gumbel-top-k: larger key first, then smaller position (select_head's comparator). 12 digits.
KVEVICT_HOST_DEVICE inline SelKey gumbel_rank_key(double g, int32_t p) {
  SelKey k{};
  k.hi = double_bits(g);
  k.lo = ~position_bits(p);
  return k;
}
// Larger position first (the recent window). 4 digits.
KVEVICT_HOST_DEVICE inline SelKey newest_key(int32_t p) {
  SelKey k{};
  k.hi = static_cast<uint64_t>(position_bits(p)) << 32;
  return k;
}
// Smaller position first (sinks; positional kept order). 4 digits.
KVEVICT_HOST_DEVICE inline SelKey oldest_key(int32_t p) {
  SelKey k{};
  k.hi = static_cast<uint64_t>(~position_bits(p)) << 32;
  return k;
}

// NACL's Gumbel key, the very expression of select_head: score / T - log(-log(u)) in double, u the
// Philox draw (counter_uniform's float widened), NaN scores as -inf. On the GPU, log is CUDA's
// (<= 1 ulp from glibc's), so two keys within an ulp of each other may order differently there.
KVEVICT_HOST_DEVICE inline double gumbel_value(float score, float u, double temperature) {
  const double s = score != score ? -__builtin_huge_val() : static_cast<double>(score);
  const double du = static_cast<double>(u);
  return s / temperature - log(-log(du));
}

// Adds v, returning the old value: atomic in a kernel, sequential in the twin (used only where the
// outcome does not depend on the order of the updates, or, for claims, only between equal keys).
KVEVICT_HOST_DEVICE inline unsigned sel_atomic_add(unsigned* p, unsigned v) {
#if defined(__CUDA_ARCH__)
  return atomicAdd(p, v);
#else
  const unsigned old = *p;
  *p = old + v;
  return old;
#endif
}

// Block state kept in shared memory (the twin: one per emulated block).
struct SelShared {
  unsigned hist[kSelBins];
  unsigned scan[2][kSelThreads];  // Hillis-Steele ping-pong; the exclusive result in scan[0]
  unsigned own[kSelThreads];
  unsigned total;                 // scan total
  unsigned count;                 // counting phases
  unsigned claim;                 // claims among keys equal to the threshold
  SelKey prefix;                  // radix select: the threshold's fixed digits
  unsigned remaining;             // radix select: rank still to find within the prefix
};

// The chunk [begin, end) of n items owned by thread t (contiguous chunks keep compactions stable).
KVEVICT_HOST_DEVICE inline void thread_chunk(int64_t n, int t, int64_t& begin, int64_t& end) {
  const int64_t c = (n + kSelThreads - 1) / kSelThreads;
  begin = c * t < n ? c * t : n;
  end = begin + c < n ? begin + c : n;
}

}  // namespace kvevict::devsel
