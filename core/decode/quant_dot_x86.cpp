// AVX2 and AVX-512 VNNI kernels of quant_dot.h for Q4_0, Q4_1, Q8_0, F16 and BF16 (Q4_K and Q6_K:
// quant_dot_x86_k.cpp, reached through x86_kernel() below). Each function
// carries its own target attribute, so this file builds for any x86-64 and best_isa() decides at run
// time which ones may run. The integer block dot is the only part that differs between the ISAs:
// AVX2 multiplies u8 x s8 pairs with maddubs and widens with madd; VNNI does both in one dpbusd.
#include "core/decode/quant_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "core/model/ggml_types.h"

namespace kvevict::quant {

// The K-quant kernels (quant_dot_x86_k.cpp); nullptr for other types or Isa::Scalar.
DotFn x86_k_kernel(uint32_t type, Isa isa);

namespace {

#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KV_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

KV_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

KV_AVX2 inline float f16(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

// 16 bytes of nibbles -> 32 unsigned bytes in element order (low nibbles 0-15, high 16-31).
KV_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), mask), _mm_and_si128(b, mask));
}

KV_AVX2 inline __m256i dot_u8s8_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
KV_VNNI inline __m256i dot_u8s8_vnni(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

// The three block formats, written once per ISA: ATTR is the target, DOT the u8 x s8 -> 8 x i32 sum.
#define KV_DEFINE_QUANT_KERNELS(SUFFIX, ATTR, DOT)                                                   \
  ATTR float q4_0_##SUFFIX(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {         \
    __m256 acc = _mm256_setzero_ps();                                                                \
    for (int b = 0; b < cols / 32; ++b) {                                                            \
      const uint8_t* blk = row + 18 * b;                                                             \
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + 32 * b)); \
      const __m256i s = _mm256_sub_epi32(DOT(unpack_nibbles(blk + 2), qx), _mm256_set1_epi32(xq.sum[b])); \
      /* (q - 8) . x = q . x - 8 sum(x): each of the 8 lanes subtracts sum(x) once */   \
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16(blk) * xq.d[b]), acc);        \
    }                                                                                                \
    return hsum(acc);                                                                                \
  }                                                                                                  \
  ATTR float q4_1_##SUFFIX(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {         \
    __m256 acc = _mm256_setzero_ps();                                                                \
    float mins = 0;                                                                                  \
    for (int b = 0; b < cols / 32; ++b) {                                                            \
      const uint8_t* blk = row + 20 * b;                                                             \
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + 32 * b)); \
      const __m256i s = DOT(unpack_nibbles(blk + 4), qx);                                            \
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16(blk) * xq.d[b]), acc);        \
      mins += f16(blk + 2) * xq.d[b] * static_cast<float>(xq.sum[b]);                                \
    }                                                                                                \
    return hsum(acc) + mins;                                                                         \
  }                                                                                                  \
  ATTR float q8_0_##SUFFIX(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {         \
    __m256 acc = _mm256_setzero_ps();                                                                \
    for (int b = 0; b < cols / 32; ++b) {                                                            \
      const uint8_t* blk = row + 34 * b;                                                             \
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));              \
      const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + 32 * b)); \
      /* signed x signed as |w| x (x with w's sign): u8 x s8 */                                      \
      const __m256i s = DOT(_mm256_sign_epi8(w, w), _mm256_sign_epi8(qx, w));                         \
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(f16(blk) * xq.d[b]), acc);        \
    }                                                                                                \
    return hsum(acc);                                                                                \
  }

KV_DEFINE_QUANT_KERNELS(avx2, KV_AVX2, dot_u8s8_avx2)
KV_DEFINE_QUANT_KERNELS(vnni, KV_VNNI, dot_u8s8_vnni)

KV_AVX2 float f16_avx2(const uint8_t* row, const float* x, const Q8Vector&, int cols) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= cols; i += 16) {
    const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i + 16)));
    a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i + 8), a1);
  }
  float acc = hsum(_mm256_add_ps(a0, a1));
  for (; i < cols; ++i) acc += f16(row + 2 * i) * x[i];
  return acc;
}

KV_AVX2 float bf16_avx2(const uint8_t* row, const float* x, const Q8Vector&, int cols) {
  __m256 a0 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= cols; i += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(h, 16)), _mm256_loadu_ps(x + i), a0);
  }
  float acc = hsum(a0);
  for (; i < cols; ++i) {
    const uint32_t bits = static_cast<uint32_t>(row[2 * i] | (row[2 * i + 1] << 8)) << 16;
    float v;
    __builtin_memcpy(&v, &bits, 4);
    acc += v * x[i];
  }
  return acc;
}

// Row dequantisers for the block products' tiles: the scalar dequantize() costs more than the
// sgemm that follows for short blocks, these run at a few instructions per 8 values.
KV_AVX2 inline void store_nibbles(const uint8_t* qs, __m256 scale, __m256 offset, float* y) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(b, mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(y + 8 * k, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k])), scale, offset));
  }
}

KV_AVX2 void dequant_q4_0_avx2(const uint8_t* row, int cols, float* y) {
  for (int b = 0; b < cols / 32; ++b, y += 32) {
    const float d = f16(row + 18 * b);
    store_nibbles(row + 18 * b + 2, _mm256_set1_ps(d), _mm256_set1_ps(-8.0f * d), y);
  }
}

KV_AVX2 void dequant_q4_1_avx2(const uint8_t* row, int cols, float* y) {
  for (int b = 0; b < cols / 32; ++b, y += 32) {
    const uint8_t* blk = row + 20 * b;
    store_nibbles(blk + 4, _mm256_set1_ps(f16(blk)), _mm256_set1_ps(f16(blk + 2)), y);
  }
}

KV_AVX2 void dequant_q8_0_avx2(const uint8_t* row, int cols, float* y) {
  for (int b = 0; b < cols / 32; ++b, y += 32) {
    const uint8_t* blk = row + 34 * b;
    const __m256 d = _mm256_set1_ps(f16(blk));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k));
      _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

KV_AVX2 void dequant_f16_avx2(const uint8_t* row, int cols, float* y) {
  int i = 0;
  for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i))));
  for (; i < cols; ++i) y[i] = f16(row + 2 * i);
}

}  // namespace

DequantFn x86_dequantizer(uint32_t type, Isa isa) {
  if (isa == Isa::Scalar) return nullptr;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return dequant_q4_0_avx2;
    case GgmlType::Q4_1: return dequant_q4_1_avx2;
    case GgmlType::Q8_0: return dequant_q8_0_avx2;
    case GgmlType::F16: return dequant_f16_avx2;
    default: return nullptr;
  }
}

DotFn x86_kernel(uint32_t type, Isa isa) {
  if (isa == Isa::Scalar) return nullptr;
  const bool vnni = isa == Isa::Avx512Vnni;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_0: return vnni ? q4_0_vnni : q4_0_avx2;
    case GgmlType::Q4_1: return vnni ? q4_1_vnni : q4_1_avx2;
    case GgmlType::Q8_0: return vnni ? q8_0_vnni : q8_0_avx2;
    case GgmlType::F16: return f16_avx2;
    case GgmlType::BF16: return bf16_avx2;
    case GgmlType::Q4_K:
    case GgmlType::Q6_K: return x86_k_kernel(type, isa);
    default: return nullptr;
  }
}

}  // namespace kvevict::quant

#else  // not x86-64: the scalar kernels only

namespace kvevict::quant {
DotFn x86_kernel(uint32_t, Isa) { return nullptr; }
DequantFn x86_dequantizer(uint32_t, Isa) { return nullptr; }
}  // namespace kvevict::quant

#endif
