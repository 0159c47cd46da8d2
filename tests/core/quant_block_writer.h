#pragma once
// Encoders of float values into ggml weight blocks for tests (round to nearest, one scale per block;
// no search for the best scales): Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16 and BF16. Written from the
// layouts documented in core/model/dequant.cpp; the round trip through kvevict::dequantize is
// checked by quant_dot_test (QuantBlockWriter.RoundTrip), so the two descriptions of each layout
// must agree.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/decode/kv_type.h"

namespace kvevict::test {

// Through the library's scalar binary16 reference (round to nearest even; checked bit for bit
// against the hardware conversion by kv_type_test), not _Float16, which clang 14 lacks without
// an F16C target (the fuzz build).
inline uint16_t to_half(float x) { return f32_to_f16_scalar(x); }
inline float from_half(uint16_t b) { return f16_to_f32_scalar(b); }
inline void put_half(std::vector<uint8_t>& out, float x) {
  const uint16_t b = to_half(x);
  out.push_back(static_cast<uint8_t>(b & 0xFF));
  out.push_back(static_cast<uint8_t>(b >> 8));
}
inline int clampi(int v, int lo, int hi) { return std::min(hi, std::max(lo, v)); }

inline void encode_q8_0(const float* x, std::vector<uint8_t>& out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = from_half(to_half(amax / 127.0f));
  put_half(out, d);
  for (int i = 0; i < 32; ++i) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? clampi(std::lround(x[i] / d), -127, 127) : 0)));
}

inline void encode_q4_0(const float* x, std::vector<uint8_t>& out) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = from_half(to_half(amax / 7.0f));
  put_half(out, d);
  auto q = [&](float v) { return d > 0 ? clampi(std::lround(v / d) + 8, 0, 15) : 8; };
  for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(q(x[i]) | (q(x[i + 16]) << 4)));
}

inline void encode_q4_1(const float* x, std::vector<uint8_t>& out) {
  const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
  const float d = from_half(to_half((hi - lo) / 15.0f)), m = from_half(to_half(lo));
  put_half(out, d);
  put_half(out, m);
  auto q = [&](float v) { return d > 0 ? clampi(std::lround((v - m) / d), 0, 15) : 0; };
  for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(q(x[i]) | (q(x[i + 16]) << 4)));
}

// 256 values: eight sub-blocks of 32 with 6-bit scale and min against fp16 d and dmin.
inline void encode_q4_k(const float* x, std::vector<uint8_t>& out) {
  float scale[8], minus[8];
  for (int j = 0; j < 8; ++j) {
    const float lo = std::min(0.0f, *std::min_element(x + 32 * j, x + 32 * j + 32));
    const float hi = *std::max_element(x + 32 * j, x + 32 * j + 32);
    scale[j] = (hi - lo) / 15.0f;
    minus[j] = -lo;
  }
  const float d = from_half(to_half(*std::max_element(scale, scale + 8) / 63.0f));
  const float dmin = from_half(to_half(*std::max_element(minus, minus + 8) / 63.0f));
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? clampi(std::lround(scale[j] / d), 0, 63) : 0;
    mn[j] = dmin > 0 ? clampi(std::lround(minus[j] / dmin), 0, 63) : 0;
  }
  put_half(out, d);
  put_half(out, dmin);
  uint8_t s[12];
  for (int k = 0; k < 4; ++k) {
    s[k] = static_cast<uint8_t>((sc[k] & 63) | ((sc[k + 4] >> 4) << 6));
    s[k + 4] = static_cast<uint8_t>((mn[k] & 63) | ((mn[k + 4] >> 4) << 6));
    s[k + 8] = static_cast<uint8_t>((sc[k + 4] & 15) | ((mn[k + 4] & 15) << 4));
  }
  out.insert(out.end(), s, s + 12);
  auto q = [&](int j, float v) {
    const float step = d * static_cast<float>(sc[j]);
    return step > 0 ? clampi(std::lround((v + dmin * static_cast<float>(mn[j])) / step), 0, 15) : 0;
  };
  for (int g = 0; g < 4; ++g) {
    for (int l = 0; l < 32; ++l) {
      out.push_back(static_cast<uint8_t>(q(2 * g, x[64 * g + l]) | (q(2 * g + 1, x[64 * g + 32 + l]) << 4)));
    }
  }
}

// 256 values: sixteen groups of 16 with signed 8-bit scales against fp16 d; q in -32..31.
inline void encode_q6_k(const float* x, std::vector<uint8_t>& out) {
  float scale[16];
  for (int i = 0; i < 16; ++i) {
    float amax = 0;
    for (int k = 0; k < 16; ++k) amax = std::max(amax, std::fabs(x[16 * i + k]));
    scale[i] = amax / 31.0f;
  }
  const float d = from_half(to_half(*std::max_element(scale, scale + 16) / 127.0f));
  int sc[16];
  for (int i = 0; i < 16; ++i) sc[i] = d > 0 ? clampi(std::lround(scale[i] / d), -128, 127) : 0;
  uint8_t ql[128] = {}, qh[64] = {};
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      for (int k = 0; k < 4; ++k) {
        const int e = 128 * h + 32 * k + l;
        const float step = d * static_cast<float>(sc[8 * h + 2 * k + l / 16]);
        const int q = (step > 0 ? clampi(std::lround(x[e] / step), -32, 31) : 0) + 32;
        uint8_t& low = ql[64 * h + l + 32 * (k % 2)];
        low |= static_cast<uint8_t>((q & 15) << (4 * (k / 2)));
        qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
      }
    }
  }
  out.insert(out.end(), ql, ql + 128);
  out.insert(out.end(), qh, qh + 64);
  for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(sc[i])));
  put_half(out, d);
}

// `n` values of type `type` (ggml id) as the file stores them.
inline std::vector<uint8_t> encode_blocks(uint32_t type, const std::vector<float>& v) {
  std::vector<uint8_t> out;
  const size_t n = v.size();
  auto blocks = [&](size_t size, void (*f)(const float*, std::vector<uint8_t>&)) {
    if (n % size) throw std::logic_error("encode_blocks: not a whole number of blocks");
    for (size_t i = 0; i < n; i += size) f(v.data() + i, out);
  };
  switch (type) {
    case 1: for (float x : v) put_half(out, x); break;
    case 30:
      for (float x : v) {
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        const uint16_t b = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to nearest even
        out.push_back(static_cast<uint8_t>(b & 0xFF));
        out.push_back(static_cast<uint8_t>(b >> 8));
      }
      break;
    case 2: blocks(32, encode_q4_0); break;
    case 3: blocks(32, encode_q4_1); break;
    case 8: blocks(32, encode_q8_0); break;
    case 12: blocks(256, encode_q4_k); break;
    case 14: blocks(256, encode_q6_k); break;
    default: throw std::logic_error("encode_blocks: unsupported type");
  }
  return out;
}

}  // namespace kvevict::test
