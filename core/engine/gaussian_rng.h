#pragma once
// Standard normal draws for the policy language's Gaussian sketch, `randn[d, e]` (docs/DSL.md §7):
// one value per (seed, layer, kv_head, d, e), a pure function of that tuple, identical in the
// interpreter, the references of the tests and generated CUDA. Built on kvevict's one generator
// (core/engine/counter_rng.h, Philox4x32-10) with its own stream:
//   counter = ((e << 16) | d, kv_head, layer, kGaussianStream = 2), key = (seed low, seed high)
//   u1 = uniform_open01(word0), u2 = uniform_open01(word1)    (both in (0, 1): log(u1) is finite)
//   randn = (float)(sqrt(-2 log u1) * cos(2 pi u2))           Box-Muller, in double, then float
// d and e are channel indices (< 65536; head_dim is at most a few hundred). A sketch
// X[e, t] = sum(d: K[d, t] * randn[d, e]) is then a right Gaussian projection as in kvpress's
// LeverageScorePress, with our generator instead of torch's: values cannot equal torch.randn's.
// In double, glibc's and CUDA's log and cos agree to within an ulp, so the float result agrees
// except in rare last-bit cases (the host-compiled kernel calls the same libm: bit for bit).
#include <cmath>

#include "core/engine/counter_rng.h"

// No comments inside: the macro is also stringified into kernel source (after KVEVICT_DEFINE_PHILOX).
#define KVEVICT_DEFINE_GAUSSIAN(FN)                                                                   \
  FN float kv_dsl_randn(unsigned long long seed, unsigned layer, unsigned kv_head, unsigned d, unsigned e) { \
    KvPhilox4x32 ctr;                                                                                \
    ctr.v[0] = (e << 16) | (d & 0xffffu);                                                            \
    ctr.v[1] = kv_head;                                                                              \
    ctr.v[2] = layer;                                                                                \
    ctr.v[3] = 2u;                                                                                   \
    const KvPhilox4x32 w = kv_philox4x32_10(ctr, (unsigned)seed, (unsigned)(seed >> 32));           \
    const double u1 = (double)kv_uniform_open01(w.v[0]);                                             \
    const double u2 = (double)kv_uniform_open01(w.v[1]);                                             \
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2));                        \
  }

namespace kvevict {

namespace gaussian_detail {  // the macro's unqualified sqrt, log, cos are the double ones of <cmath>
using std::cos;
using std::log;
using std::sqrt;
KVEVICT_DEFINE_GAUSSIAN(KVEVICT_HOST_DEVICE inline)
}  // namespace gaussian_detail
using gaussian_detail::kv_dsl_randn;

inline constexpr uint32_t kGaussianStream = 2;  // kv_dsl_randn's stream (the literal 2u above)

}  // namespace kvevict
