#include "core/model/dequant.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "core/model/ggml_types.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float load_f16(const uint8_t* p) { return fp16_to_float(load_u16(p)); }

// Q8_0 block (34 bytes): fp16 scale d, then 32 signed bytes q; x = d * q.
void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

// Q4_0 block (18 bytes): fp16 d, 16 bytes of nibbles; low nibbles are elements 0-15, high 16-31;
// x = d * (q - 8).
void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((qs[i] & 0x0F) - 8);
    y[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
  }
}

// Q4_1 block (20 bytes): fp16 d, fp16 m, 16 bytes of nibbles (same order as Q4_0); x = d * q + m.
void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(qs[i] & 0x0F) + m;
    y[i + 16] = d * static_cast<float>(qs[i] >> 4) + m;
  }
}

// Q4_K super-block (144 bytes, 256 elements): fp16 d, fp16 dmin, 12 bytes packing eight 6-bit scales
// and eight 6-bit mins, 128 bytes of nibbles. Sub-block j (32 elements) has x = d*sc[j]*q - dmin*mn[j].
// Scales/mins 0-3 are the low 6 bits of bytes 0-3 / 4-7; scales/mins 4-7 take their low 4 bits from
// byte 8+j' (low / high nibble) and their top 2 bits from the spare top bits of bytes 0-3 / 4-7.
// Elements come in 64-element groups: low nibbles of 32 bytes first (sub-block 2g), then high (2g+1).
void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int group = 0; group < 4; ++group) {
    int sc_lo, mn_lo, sc_hi, mn_hi;
    q4_k_scale_min(2 * group, scales, sc_lo, mn_lo);
    q4_k_scale_min(2 * group + 1, scales, sc_hi, mn_hi);
    const float d_lo = d * static_cast<float>(sc_lo), m_lo = dmin * static_cast<float>(mn_lo);
    const float d_hi = d * static_cast<float>(sc_hi), m_hi = dmin * static_cast<float>(mn_hi);
    const uint8_t* q = qs + 32 * group;
    float* out = y + 64 * group;
    for (int l = 0; l < 32; ++l) {
      out[l] = d_lo * static_cast<float>(q[l] & 0x0F) - m_lo;
      out[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
    }
  }
}

// Q6_K super-block (210 bytes, 256 elements): 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits),
// 16 signed 8-bit scales (one per 16 elements), fp16 d; x = d * scale * (q - 32), q in 0..63.
// Each 128-element half uses 64 ql bytes and 32 qh bytes: for l in 0..31 the four elements
// l, l+32, l+64, l+96 take ql[l] low, ql[l+32] low, ql[l] high, ql[l+32] high nibbles and
// bits 0-1, 2-3, 4-5, 6-7 of qh[l].
void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int half = 0; half < 2; ++half) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is] * q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

void q4_k_scale_min(int j, const uint8_t* s, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {
      // Subnormal half: value = mantissa * 2^-24, exact in float.
      const float v = static_cast<float>(mantissa) * 0x1p-24f;
      return sign ? -v : v;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7F800000u | (mantissa << 13);  // inf or NaN (payload kept)
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 -> 127
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

size_t ggml_tensor_bytes(uint32_t type, uint64_t n_elements, const std::string& file, const std::string& tensor) {
  const GgmlTypeTraits* t = ggml_type_traits(type);
  if (!t) throw ModelError(file, "tensor " + tensor + " has unknown type id " + std::to_string(type));
  if (n_elements % t->block_elements != 0) {
    throw ModelError(file, "tensor " + tensor + " of type " + t->name + " has " + std::to_string(n_elements) +
                               " elements, not a multiple of the block size " + std::to_string(t->block_elements));
  }
  const uint64_t blocks = n_elements / t->block_elements;
  if (blocks > SIZE_MAX / t->block_bytes) throw ModelError(file, "tensor " + tensor + " is too large");
  return static_cast<size_t>(blocks) * t->block_bytes;
}

void dequantize(uint32_t type, const uint8_t* src, uint64_t n_elements, float* dst, const std::string& file,
                const std::string& tensor) {
  const GgmlTypeTraits* t = ggml_type_traits(type);
  if (!t || !t->dequantizable) {
    throw ModelError(file, "tensor " + tensor + " has type " + ggml_type_name(type) +
                               ", which kvevict cannot dequantise (supported: " + supported_ggml_types() + ")");
  }
  const size_t bytes = ggml_tensor_bytes(type, n_elements, file, tensor);
  const uint64_t blocks = n_elements / t->block_elements;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      std::memcpy(dst, src, bytes);
      return;
    case GgmlType::F16:
      for (uint64_t i = 0; i < n_elements; ++i) dst[i] = load_f16(src + 2 * i);
      return;
    case GgmlType::BF16:
      for (uint64_t i = 0; i < n_elements; ++i) dst[i] = bf16_to_float(load_u16(src + 2 * i));
      return;
    default:
      break;
  }
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::Q8_0: block_fn = dequant_q8_0; break;
    case GgmlType::Q4_0: block_fn = dequant_q4_0; break;
    case GgmlType::Q4_1: block_fn = dequant_q4_1; break;
    case GgmlType::Q4_K: block_fn = dequant_q4_k; break;
    case GgmlType::Q6_K: block_fn = dequant_q6_k; break;
    default: throw ModelError(file, "tensor " + tensor + ": no dequantiser for " + ggml_type_name(type));
  }
  // Single-threaded on purpose: all of SmolLM2 dequantises in a fraction of a second, and an
  // OpenMP team here would spin against the decoder's threads on a loaded machine.
  for (int64_t i = 0; i < static_cast<int64_t>(blocks); ++i) {
    block_fn(src + static_cast<size_t>(i) * t->block_bytes, dst + static_cast<size_t>(i) * t->block_elements);
  }
}

namespace {

// The first column of one row whose 16-bit value has every bit of `exponent` set, or -1. The scan
// has no early exit, so it vectorises; the column is found only in a row that has one.
int64_t first_all_ones_exponent(const uint8_t* row, uint64_t cols, uint16_t exponent) {
  unsigned any = 0;  // an integer OR (a bool's does not vectorise with GCC 12)
  for (uint64_t i = 0; i < cols; ++i) {
    uint16_t w;
    std::memcpy(&w, row + 2 * i, 2);
    any |= static_cast<unsigned>((w & exponent) == exponent);
  }
  if (any == 0) return -1;
  for (uint64_t i = 0; i < cols; ++i) {
    uint16_t w;
    std::memcpy(&w, row + 2 * i, 2);
    if ((w & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t first_non_finite(uint32_t type, const uint8_t* data, uint64_t rows, uint64_t cols, size_t row_bytes,
                         const std::string& file, const std::string& tensor) {
  const bool f16 = type == static_cast<uint32_t>(GgmlType::F16), bf16 = type == static_cast<uint32_t>(GgmlType::BF16);
  const uint16_t exponent = f16 ? 0x7c00 : 0x7f80;
  int64_t first = -1;
  std::exception_ptr failure;
#pragma omp parallel
  {
    std::vector<float> values(f16 || bf16 ? 0 : cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < static_cast<int64_t>(rows); ++r) {
      const uint8_t* row = data + static_cast<size_t>(r) * row_bytes;
      int64_t column = -1;
      if (f16 || bf16) {
        column = first_all_ones_exponent(row, cols, exponent);
      } else {
        try {
          dequantize(type, row, cols, values.data(), file, tensor);
        } catch (...) {
#pragma omp critical(first_non_finite_failure)
          if (!failure) failure = std::current_exception();
          continue;
        }
        for (uint64_t i = 0; i < cols && column < 0; ++i)
          if (!std::isfinite(values[i])) column = static_cast<int64_t>(i);
      }
      if (column >= 0) {
        const int64_t at = r * static_cast<int64_t>(cols) + column;
#pragma omp critical(first_non_finite_index)
        if (first < 0 || at < first) first = at;
      }
    }
  }
  if (failure) std::rethrow_exception(failure);
  return first;
}

}  // namespace kvevict
