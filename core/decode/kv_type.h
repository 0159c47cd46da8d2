#pragma once
// The element type of the KV cache's stored keys and values (KVCache, KvRows). F16 is the
// default: half the bytes of F32 with 11 significant bits, enough for attention over normalised
// activations (docs/ENGINE.md, "KV element type"); BF16 keeps f32's range with 8 bits; F32 is the
// exact reference. Conversions round to nearest even, keep subnormals, inf and NaN (a NaN stays a
// NaN, quietened). Everything that computes on the cache reads f32: the bulk conversions below
// turn stored rows into f32 scratch, and appends convert from f32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvevict {

enum class KvType { F32, F16, BF16 };

// "f32" | "f16" | "bf16" -> KvType; UsageError (exit 2) naming `where` and the accepted names otherwise.
KvType parse_kv_type(std::string_view name, std::string_view where);
const char* kv_type_name(KvType type);
inline size_t kv_type_size(KvType type) { return type == KvType::F32 ? 4 : 2; }

// Bulk conversions (F16C / AVX-512 where the build targets them, else the scalar references).
// `bits` are IEEE binary16 or bfloat16 patterns; `type` must be F16 or BF16.
void kv_to_f32(KvType type, const uint16_t* bits, float* out, size_t n);
void kv_from_f32(KvType type, const float* in, uint16_t* bits, size_t n);

// Scalar references (tested against the bulk paths; also the portable fallback).
uint16_t f32_to_f16_scalar(float x);
float f16_to_f32_scalar(uint16_t h);
uint16_t f32_to_bf16_scalar(float x);
float bf16_to_f32_scalar(uint16_t b);

}  // namespace kvevict
