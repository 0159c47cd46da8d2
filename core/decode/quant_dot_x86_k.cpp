// AVX2 and AVX-512 VNNI kernels of quant_dot.h for the K-quant formats Q4_K and Q6_K, written from
// the block layouts in core/model/dequant.cpp. Like quant_dot_x86.cpp, every function carries its own
// target attribute and best_isa() decides at run time which may run; x86_kernel() hands Q4_K and
// Q6_K to x86_k_kernel() below. Each 32-element sub-block lines up with one activation block, so
// the integer sums are the scalar reference's (quant_dot_scalar.cpp), exactly; only the f32
// accumulation order differs.
//
// Integer products are unsigned byte x signed byte (maddubs / vpdpbusd read the first operand as
// unsigned): the 4-bit and 6-bit weights are used as stored (0..15, 0..63) and their offsets (Q4_K's
// min, Q6_K's 32) are taken off with the activation sums. int16 range in maddubs: a pair sum is at
// most 2 * 63 * 128 = 16128 (Q6_K) and 2 * 15 * 128 = 3840 (Q4_K), below 32767, so it never
// saturates; Q6_K's (q - 32) pair sums are at most 2 * 32 * 128 = 8192 before the int16 scale
// multiply in madd, which widens to int32.
#include "core/decode/quant_dot.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "core/model/ggml_types.h"

namespace kvevict::quant {
namespace {

#define KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KV_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

KV_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

KV_AVX2 inline float half_at(const uint8_t* p) { return _cvtsh_ss(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

KV_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Sum of u * s over 32 byte pairs, as 8 int32 lanes (lane i holds elements 4i..4i+3 for VNNI,
// a pair-of-pairs arrangement for AVX2; either way lanes 0-3 cover elements 0-15 and 4-7 cover 16-31).
KV_AVX2 inline __m256i udot_avx2(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
KV_VNNI inline __m256i udot_vnni(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

// Q6_K sub-block sum sc_lo * sum_{l<16} (u_l - 32) x_l + sc_hi * sum_{l>=16} (u_l - 32) x_l as 8
// int32 lanes; `sc` holds sc_lo in the int16 lanes of elements 0-15 and sc_hi in those of 16-31.
KV_AVX2 inline __m256i q6_scaled_avx2(__m256i u, __m256i x, __m256i sc) {
  const __m256i centred = _mm256_sub_epi16(_mm256_maddubs_epi16(u, x), _mm256_maddubs_epi16(_mm256_set1_epi8(32), x));
  return _mm256_madd_epi16(centred, sc);
}
KV_AVX2 inline __m256i q6_scales_avx2(const int8_t* sc) {
  return _mm256_set_m128i(_mm_set1_epi16(sc[1]), _mm_set1_epi16(sc[0]));
}
// The eight 6-bit scales (`sc`) and mins (`mn`) of a Q4_K super-block as int32 lanes j = 0..7
// (q4_k_scale_min for every j at once; a scalar unpack through memory stalls on store forwarding).
// Bytes 0-3 / 4-7 give scales / mins 0-3 in their low 6 bits and the top 2 bits of scales / mins
// 4-7 in their top 2 bits; bytes 8-11 give the low 4 bits of scale (low nibble) and min (high) 4-7.
KV_AVX2 inline void q4_k_scales_mins(const uint8_t* s, __m256i& sc, __m256i& mn) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));  // 12 bytes used
  const __m128i low6 = _mm_and_si128(v, _mm_set1_epi8(63));
  const __m128i top2 = _mm_and_si128(_mm_srli_epi16(v, 2), _mm_set1_epi8(0x30));  // bits 6-7 -> 4-5
  const __m128i lo4 = _mm_and_si128(v, _mm_set1_epi8(0x0F));
  const __m128i hi4 = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
  constexpr char z = -1;  // pshufb index with the top bit set: a zero byte
  // Result bytes: scales 0-7, then mins 0-7.
  const __m128i t = _mm_or_si128(
      _mm_or_si128(_mm_shuffle_epi8(low6, _mm_setr_epi8(0, 1, 2, 3, z, z, z, z, 4, 5, 6, 7, z, z, z, z)),
                   _mm_shuffle_epi8(top2, _mm_setr_epi8(z, z, z, z, 0, 1, 2, 3, z, z, z, z, 4, 5, 6, 7))),
      _mm_or_si128(_mm_shuffle_epi8(lo4, _mm_setr_epi8(z, z, z, z, 8, 9, 10, 11, z, z, z, z, z, z, z, z)),
                   _mm_shuffle_epi8(hi4, _mm_setr_epi8(z, z, z, z, z, z, z, z, z, z, z, z, 8, 9, 10, 11))));
  sc = _mm256_cvtepu8_epi32(t);
  mn = _mm256_cvtepu8_epi32(_mm_srli_si128(t, 8));
}

// Q4_K: per 64-element group g of a super-block, the low nibbles of 32 bytes are sub-block 2g and
// the high nibbles sub-block 2g + 1; sub-block j is activation block 8 * sb + j. The eight
// per-sub-block factors d * sc_j * xd and the min term dmin * mn_j * sum_j * xd are vectors of 8.
#define KV_DEFINE_Q4_K(SUFFIX, ATTR, DOT)                                                             \
  ATTR float q4_k_##SUFFIX(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {          \
    __m256 acc = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps(), mins = _mm256_setzero_ps();       \
    const __m256i mask = _mm256_set1_epi8(0x0F);                                                      \
    for (int sb = 0; sb < cols / 256; ++sb) {                                                         \
      const uint8_t* blk = row + 144 * sb;                                                            \
      __m256i sc, mn;                                                                                 \
      alignas(32) float factor[8];                                                                    \
      q4_k_scales_mins(blk + 4, sc, mn);                                                              \
      const __m256 xd = _mm256_loadu_ps(xq.d.data() + 8 * sb);                                        \
      const __m256i xsum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.sum.data() + 8 * sb)); \
      const __m256 m = _mm256_cvtepi32_ps(_mm256_mullo_epi32(mn, xsum)); \
      mins = _mm256_fmadd_ps(m, _mm256_mul_ps(_mm256_set1_ps(half_at(blk + 2)), xd), mins);           \
      _mm256_store_ps(factor, _mm256_mul_ps(_mm256_cvtepi32_ps(sc), \
                                            _mm256_mul_ps(_mm256_set1_ps(half_at(blk)), xd)));        \
      const int8_t* qx = xq.q.data() + 256 * sb;                                                      \
      for (int g = 0; g < 4; ++g) {                                                                   \
        const __m256i q = load32(blk + 16 + 32 * g);                                                  \
        const __m256i lo = DOT(_mm256_and_si256(q, mask), load32(qx + 64 * g));                       \
        const __m256i hi = DOT(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), load32(qx + 64 * g + 32)); \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_set1_ps(factor[2 * g]), acc);            \
        acc_hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(factor[2 * g + 1]), acc_hi);       \
      }                                                                                               \
    }                                                                                                 \
    return hsum8(_mm256_add_ps(acc, acc_hi)) - hsum8(mins);                                                                \
  }

// Q6_K: in half hf of a super-block, element l + 32k (k = 0..3, l = 0..31) is activation block
// 8 * sb + 4 * hf + k: its low 4 bits are the low (k < 2) or high (k >= 2) nibble of
// ql[l + 32 * (k % 2)], its top 2 bits are bits 2k, 2k+1 of qh[l]; scales sc[8 hf + 2k + l / 16].
KV_AVX2 float q6_k_avx2(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  for (int sb = 0; sb < cols / 256; ++sb) {
    const uint8_t* blk = row + 210 * sb;
    const float d = half_at(blk + 208);
    for (int hf = 0; hf < 2; ++hf) {
      const __m256i ql0 = load32(blk + 64 * hf), ql1 = load32(blk + 64 * hf + 32);
      const __m256i qh = load32(blk + 128 + 32 * hf);
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * hf;
      // top 2 bits moved to bits 4-5 of each byte (16-bit shifts; the masks drop what crosses bytes)
      const __m256i u[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
      for (int k = 0; k < 4; ++k) {
        const int ab = 8 * sb + 4 * hf + k;
        const __m256i s = q6_scaled_avx2(u[k], load32(xq.q.data() + 32 * ab), q6_scales_avx2(sc + 2 * k));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xq.d[ab]), acc);
      }
    }
  }
  return hsum8(acc);
}

KV_DEFINE_Q4_K(avx2, KV_AVX2, udot_avx2)
KV_DEFINE_Q4_K(vnni, KV_VNNI, udot_vnni)

// Q6_K with AVX-512 VNNI: two activation blocks (64 contiguous int8) per vpdpbusd on 512-bit
// vectors. Sub-blocks k and k + 1 (k = 0, 2) of a half read the two 32-byte halves of the same 64
// ql bytes and the same qh bytes at different shifts, so one variable shift per 256-bit half builds
// both. (Measured 1.2x the 256-bit form on Q6_K; on Q4_K the lane permutes ate the gain.)
// The masked forms with all lanes set (maskz_*) say the same as the plain ones; the plain ones pass
// an undefined vector that GCC 12 reports as maybe-uninitialized (fixed in GCC 13).
KV_VNNI inline __m512i twice(__m256i v) { return _mm512_maskz_broadcast_i64x4(0xFF, v); }
KV_VNNI inline __m512i load64(const void* p) { return _mm512_loadu_si512(p); }
// Lanes 0-7 take lane `first` of v, lanes 8-15 lane `first + 1` (v's lanes 0-7 used).
KV_VNNI inline __m512 pair_of(__m512 v, int first) {
  return _mm512_maskz_permutexvar_ps(0xFFFF, _mm512_add_epi32(_mm512_set1_epi32(first), _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)), v);
}
KV_VNNI inline float hsum16(__m512 v) {
  const __m512d w = _mm512_castps_pd(v);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, w, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, w, 1));
  return hsum8(_mm256_add_ps(lo, hi));
}

KV_VNNI float q6_k_vnni(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  __m512 acc = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30), off = _mm512_set1_epi8(32);
  // qh bits 2k, 2k+1 to bits 4-5: k = 0, 1 shift left by 4, 2; k = 2, 3 shift right by 0, 2.
  const __m512i left01 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2), right23 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
  // int32 lane i of a pair product covers elements 4i..4i+3: scale index i / 4 of the four.
  const __m512i scale_lane = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int sb = 0; sb < cols / 256; ++sb) {
    const uint8_t* blk = row + 210 * sb;
    for (int hf = 0; hf < 2; ++hf) {
      const __m512i ql = load64(blk + 64 * hf);  // ql0 | ql1
      const __m512i qh = twice(load32(blk + 128 + 32 * hf));
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * hf;
      const __m512 factor = _mm512_zextps128_ps512(
          _mm_mul_ps(_mm_set1_ps(half_at(blk + 208)), _mm_loadu_ps(xq.d.data() + 8 * sb + 4 * hf)));
      const __m512i u[2] = {
          _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_maskz_sllv_epi64(0xFF, qh, left01), m2)),
          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(_mm512_maskz_srlv_epi64(0xFF, qh, right23), m2))};
      for (int p = 0; p < 2; ++p) {
        const int ab = 8 * sb + 4 * hf + 2 * p;
        const __m512i x = load64(xq.q.data() + 32 * ab);
        const __m512i centred = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p], x),
                                                 _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, x));
        int32_t four;
        __builtin_memcpy(&four, sc + 4 * p, 4);
        const __m512i scales = _mm512_maskz_permutexvar_epi32(0xFFFF, scale_lane, _mm512_zextsi128_si512(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(four))));
        acc = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_mullo_epi32(centred, scales)), pair_of(factor, 2 * p), acc);
      }
    }
  }
  return hsum16(acc);
}

}  // namespace

DotFn x86_k_kernel(uint32_t type, Isa isa) {
  if (isa == Isa::Scalar) return nullptr;
  const bool vnni = isa == Isa::Avx512Vnni;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q4_K: return vnni ? q4_k_vnni : q4_k_avx2;
    case GgmlType::Q6_K: return vnni ? q6_k_vnni : q6_k_avx2;
    default: return nullptr;
  }
}

}  // namespace kvevict::quant

#else  // not x86-64: the scalar kernels only

namespace kvevict::quant {
DotFn x86_k_kernel(uint32_t, Isa) { return nullptr; }
}  // namespace kvevict::quant

#endif
