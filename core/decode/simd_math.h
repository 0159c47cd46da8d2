#pragma once
// Vectorised float loops for the attention kernels, written with GCC/Clang vector extensions so
// they compile to AVX-512, AVX2 or SSE as -march allows (the auto-vectoriser leaves these
// reductions and the exp scalar). Each function has a scalar tail for n % 16.
#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // 64-byte vectors in static inline functions only

namespace kvevict::simd {

typedef float f16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));
typedef uint32_t u16 __attribute__((vector_size(64)));  // bit arithmetic that may wrap

static inline f16 load(const float* p) {
  f16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
static inline void store(float* p, f16 v) { std::memcpy(p, &v, sizeof v); }
static inline f16 splat(float x) { return f16{} + x; }

// exp(x) for x <= 0, ~2e-7 relative error: x = n ln2 + r with |r| <= ln2/2 (n rounded with the
// 1.5 * 2^23 trick), e^r by its degree-6 Taylor polynomial, 2^n through the exponent bits.
// Inputs below -87 are clamped (result ~1e-38, i.e. 0 for the sums it feeds).
static inline f16 exp_nonpositive(f16 x) {
  x = x > -87.0f ? x : splat(-87.0f);
  const f16 magic = splat(12582912.0f);
  const f16 n = (x * 1.44269504f + magic) - magic;
  const f16 r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  f16 p = splat(1.0f / 720.0f);
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i16 bits = (__builtin_convertvector(n, i16) + 127) << 23;
  return p * (f16)bits;
}

static inline float exp_nonpositive(float x) {
  x = x > -87.0f ? x : -87.0f;
  const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// Natural log of 16 positive normal floats, ~1 ulp: x = m 2^e with m in [sqrt(1/2), sqrt(2))
// (found on the bits: subtracting the bits of sqrt(1/2) before the shift moves the exponent
// boundary there, branch-free), log m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172, by its
// odd series to s^9 (the next term is below 1e-9); e ln 2 is added in two parts so that results
// near 0 (x near 1, e = 0) keep their relative accuracy. Lanes that are not positive normal finite
// numbers give garbage and must be patched by the caller (see log_array).
static constexpr int32_t kBitsSqrtHalf = 0x3f3504f3;

__attribute__((always_inline)) static inline f16 log_positive_normal(f16 x) {
  // Unsigned bit arithmetic: lanes that are zero, negative or special wrap instead of overflowing.
  u16 bits;
  std::memcpy(&bits, &x, sizeof bits);
  const i16 e = __builtin_convertvector(bits - static_cast<uint32_t>(kBitsSqrtHalf), i16) >> 23;
  const u16 mant_bits = bits - (__builtin_convertvector(e, u16) << 23);
  f16 m;
  std::memcpy(&m, &mant_bits, sizeof m);
  const f16 s = (m - 1.0f) / (m + 1.0f);
  const f16 s2 = s * s;
  f16 p = splat(1.0f / 9.0f);
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  const f16 ef = __builtin_convertvector(e, f16);
  return ef * 0.693145752f + (2.0f * s * p + ef * 1.42860677e-6f);
}

static inline float log_positive_normal(float x) {
  // Unsigned bit arithmetic: callers also pass zeros, negatives and specials here (their results
  // are replaced by log_fallback afterwards), and int32 subtraction would overflow for those.
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const int32_t e = static_cast<int32_t>(bits - static_cast<uint32_t>(kBitsSqrtHalf)) >> 23;
  const uint32_t mant_bits = bits - (static_cast<uint32_t>(e) << 23);
  float m;
  std::memcpy(&m, &mant_bits, sizeof m);
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = 1.0f / 9.0f;
  p = p * s2 + 1.0f / 7.0f;
  p = p * s2 + 1.0f / 5.0f;
  p = p * s2 + 1.0f / 3.0f;
  p = p * s2 + 1.0f;
  const float ef = static_cast<float>(e);
  return ef * 0.693145752f + (2.0f * s * p + ef * 1.42860677e-6f);
}

static inline bool positive_normal(float x) { return x >= 1.17549435e-38f && x <= 3.40282347e38f; }

static inline float hsum(f16 v) {
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += v[j];
  return s;
}

// max of x[0, n), n >= 1
static inline float max(const float* x, int n) {
  int i = 0;
  float m = x[0];
  if (n >= 16) {
    f16 acc = load(x);
    for (i = 16; i + 16 <= n; i += 16) {
      const f16 v = load(x + i);
      acc = acc > v ? acc : v;
    }
    for (int j = 0; j < 16; ++j) m = m > acc[j] ? m : acc[j];
  }
  for (; i < n; ++i) m = m > x[i] ? m : x[i];
  return m;
}

// x[i] = exp(x[i] - shift) (every x[i] <= shift); returns the sum.
static inline float exp_shift_sum(float* x, int n, float shift) {
  f16 acc = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const f16 e = exp_nonpositive(load(x + i) - shift);
    store(x + i, e);
    acc += e;
  }
  float sum = hsum(acc);
  for (; i < n; ++i) {
    x[i] = exp_nonpositive(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// out[i] += exp(x[i] - shift) * scale
static inline void exp_shift_scale_add(const float* x, int n, float shift, float scale, float* out) {
  int i = 0;
  for (; i + 16 <= n; i += 16) store(out + i, load(out + i) + exp_nonpositive(load(x + i) - shift) * scale);
  for (; i < n; ++i) out[i] += exp_nonpositive(x[i] - shift) * scale;
}

// out[i] = log(x[i]); zero, negative, subnormal, infinite and NaN inputs take libm's answer
// (log_fallback, normally std::log) so that the special values stay exact. Positive normal finite
// floats are exactly those whose bits minus the smallest normal's lie in [0, 0x7f000000).
template <class Fallback>
static inline void log_array(const float* x, long n, float* out, Fallback log_fallback) {
  i16 bad = {};
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const f16 v = load(x + i);
    u16 bits;
    std::memcpy(&bits, &v, sizeof bits);
    const i16 k = __builtin_convertvector(bits - 0x00800000u, i16);  // wraps for negative inputs
    bad |= (k < 0) | (k >= 0x7f000000);
    store(out + i, log_positive_normal(v));
  }
  bool any_bad = false;
  for (int j = 0; j < 16; ++j) any_bad |= bad[j] != 0;
  for (; i < n; ++i) {
    out[i] = log_positive_normal(x[i]);
    any_bad |= !positive_normal(x[i]);
  }
  if (!any_bad) return;
  for (i = 0; i < n; ++i)
    if (!positive_normal(x[i])) out[i] = log_fallback(x[i]);
}

static inline float dot(const float* a, const float* b, int n) {
  f16 acc = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) acc += load(a + i) * load(b + i);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += a * x
static inline void axpy(float a, const float* x, float* y, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) store(y + i, load(y + i) + load(x + i) * a);
  for (; i < n; ++i) y[i] += a * x[i];
}

static inline void scale(float* x, int n, float a) {
  int i = 0;
  for (; i + 16 <= n; i += 16) store(x + i, load(x + i) * a);
  for (; i < n; ++i) x[i] *= a;
}

// gate[i] = silu(gate[i]) * up[i], silu(g) = g * sigmoid(g) with sigmoid from exp(-|g|) (never overflows).
static inline void silu_mul(float* gate, const float* up, long n) {
  long i = 0;
  for (; i + 16 <= n; i += 16) {
    const f16 g = load(gate + i);
    const f16 neg_abs = g > 0.0f ? -g : g;
    const f16 e = exp_nonpositive(neg_abs);
    const f16 sigmoid = (g > 0.0f ? splat(1.0f) : e) / (1.0f + e);
    store(gate + i, g * sigmoid * load(up + i));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    const float e = exp_nonpositive(g > 0.0f ? -g : g);
    const float sigmoid = (g > 0.0f ? 1.0f : e) / (1.0f + e);
    gate[i] = g * sigmoid * up[i];
  }
}

}  // namespace kvevict::simd

#pragma GCC diagnostic pop
