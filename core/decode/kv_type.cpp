// KV element types and their conversions (contract in kv_type.h). The scalar functions are the
// reference; the bulk loops use F16C (8 lanes) or AVX-512 (16 lanes) for binary16 when the
// compiler targets them (the core library builds with -march=native), and plain integer code for
// bfloat16, which the compiler vectorises (VCVTNEPS2BF16 would flush subnormals, so it is not used).
#include "core/decode/kv_type.h"

#include <string>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "core/decode/kv_type_scalar.h"
#include "core/util/error.h"

namespace kvevict {

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

// The scalar references live in kv_type_scalar.h (shared with the device KV cache's kernels).
uint16_t f32_to_f16_scalar(float x) { return kv_scalar::f32_to_f16(x); }
float f16_to_f32_scalar(uint16_t h) { return kv_scalar::f16_to_f32(h); }
uint16_t f32_to_bf16_scalar(float x) { return kv_scalar::f32_to_bf16(x); }
float bf16_to_f32_scalar(uint16_t b) { return kv_scalar::bf16_to_f32(b); }

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
