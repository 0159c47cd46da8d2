#pragma once
// The scalar KV element conversions (contract in kv_type.h: round to nearest even, subnormals,
// inf and NaN kept, a NaN quietened with its top payload bits), written once as inline
// KVEVICT_HOST_DEVICE functions: kv_type.cpp's f32_to_f16_scalar & co. call them on the host, and
// the device KV cache's append kernel (device_kv_elements.h) calls them on the device, so a
// device cache holds bit for bit what the host KVCache holds for the same f32 input.
#include <cstdint>
#include <cstring>

#include "core/util/host_device.h"

namespace kvevict::kv_scalar {

KVEVICT_HOST_DEVICE inline uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KVEVICT_HOST_DEVICE inline float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

KVEVICT_HOST_DEVICE inline uint16_t f32_to_f16(float x) {
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

KVEVICT_HOST_DEVICE inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * 0x1p-24f));  // exact: m < 2^10
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

KVEVICT_HOST_DEVICE inline uint16_t f32_to_bf16(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

KVEVICT_HOST_DEVICE inline float bf16_to_f32(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

}  // namespace kvevict::kv_scalar
