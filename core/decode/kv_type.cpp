// KV element types and their conversions (contract in kv_type.h). The scalar functions are the
// reference; the bulk loops use F16C (8 lanes) or AVX-512 (16 lanes) for binary16 when the
// compiler targets them (the core library builds with -march=native), and plain integer code for
// bfloat16, which the compiler vectorises (VCVTNEPS2BF16 would flush subnormals, so it is not used).
#include "core/decode/kv_type.h"

#include <cstring>
#include <string>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/util/error.h"

namespace kvevict {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace

KvType parse_kv_type(std::string_view name, std::string_view where) {
  if (name == "f16") return KvType::F16;
  if (name == "bf16") return KvType::BF16;
  if (name == "f32") return KvType::F32;
  throw UsageError(std::string(where) + ": unknown KV cache type '" + std::string(name) + "' (expected f16, bf16 or f32)");
}

const char* kv_type_name(KvType type) {
  switch (type) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::BF16: return "bf16";
  }
  return "?";
}

uint16_t f32_to_f16_scalar(float x) {
  uint32_t u = bits_of(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) {  // inf, or NaN quietened with its top payload bits
    return sign | (u > 0x7f800000u ? static_cast<uint16_t>(0x7e00u | ((u >> 13) & 0x3ffu)) : uint16_t{0x7c00});
  }
  if (u >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (halfway above 65504) rounds to inf
  if (u >= 0x38800000u) {                        // normal half (>= 2^-14): rebias, round to nearest even
    const uint32_t rounded = u + 0xfffu + ((u >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (u <= 0x33000000u) return sign;  // <= 2^-25: rounds to zero (2^-25 is a tie, zero is even)
  // Subnormal half: the value in units of 2^-24 is m * 2^(e - 126), rounded to nearest even.
  const uint32_t e = u >> 23, m = (u & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 .. 24
  uint32_t r = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal: still right
  return sign | static_cast<uint16_t>(r);
}

float f16_to_f32_scalar(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * 0x1p-24f));  // exact: m < 2^10
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t f32_to_bf16_scalar(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float bf16_to_f32_scalar(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

void kv_to_f32(KvType type, const uint16_t* bits, float* out, size_t n) {
  size_t i = 0;
  if (type == KvType::BF16) {
    for (; i < n; ++i) out[i] = bf16_to_f32_scalar(bits[i]);
    return;
  }
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + i))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i))));
#endif
  for (; i < n; ++i) out[i] = f16_to_f32_scalar(bits[i]);
}

void kv_from_f32(KvType type, const float* in, uint16_t* bits, size_t n) {
  size_t i = 0;
  if (type == KvType::BF16) {
    for (; i < n; ++i) bits[i] = f32_to_bf16_scalar(in[i]);
    return;
  }
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) bits[i] = f32_to_f16_scalar(in[i]);
}

}  // namespace kvevict
