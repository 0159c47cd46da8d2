// Portable reference kernels of quant_dot.h: one per weight format, written from the block layouts
// documented in core/model/dequant.cpp. Integer sums per 32-element activation block, scaled once.
#include <cmath>
#include <cstring>

#include "core/decode/quant_dot.h"
#include "core/model/dequant.h"
#include "core/model/ggml_types.h"

namespace kvevict::quant {
namespace {

float f16_at(const uint8_t* p) { return fp16_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

float dot_f32(const uint8_t* row, const float* x, const Q8Vector&, int cols) {
  double acc = 0;
  for (int i = 0; i < cols; ++i) {
    float w;
    std::memcpy(&w, row + 4 * i, 4);
    acc += static_cast<double>(w) * x[i];
  }
  return static_cast<float>(acc);
}

float dot_f16(const uint8_t* row, const float* x, const Q8Vector&, int cols) {
  float acc = 0;
  for (int i = 0; i < cols; ++i) acc += f16_at(row + 2 * i) * x[i];
  return acc;
}

float dot_bf16(const uint8_t* row, const float* x, const Q8Vector&, int cols) {
  float acc = 0;
  for (int i = 0; i < cols; ++i) acc += bf16_to_float(static_cast<uint16_t>(row[2 * i] | (row[2 * i + 1] << 8))) * x[i];
  return acc;
}

// Every integer product here is unsigned byte x signed byte, on purpose: GCC 12.2 with -march=native
// vectorises a signed-byte x signed-byte sum with vpdpbusd, which reads one operand as unsigned
// (wrong sums; caught by QuantDot.WithinTheActivationBound). Signed weights are offset to unsigned
// (w + 128, q6 + 32) and the offset times the activation sum is subtracted after the loop.
float dot_q8_0(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  float acc = 0;
  for (int b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = row + 34 * b;
    const int8_t* qx = xq.q.data() + 32 * b;
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += static_cast<uint8_t>(blk[2 + i] ^ 0x80) * qx[i];  // w + 128
    s -= 128 * xq.sum[b];
    acc += f16_at(blk) * xq.d[b] * static_cast<float>(s);
  }
  return acc;
}

// Sum of nibble * qx over a 32-element block stored as 16 bytes (low nibbles first).
int32_t nibble_dot(const uint8_t* qs, const int8_t* qx) {
  int32_t s = 0;
  for (int i = 0; i < 16; ++i) s += (qs[i] & 0x0F) * qx[i] + (qs[i] >> 4) * qx[i + 16];
  return s;
}

float dot_q4_0(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  float acc = 0;
  for (int b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = row + 18 * b;
    const int32_t s = nibble_dot(blk + 2, xq.q.data() + 32 * b) - 8 * xq.sum[b];
    acc += f16_at(blk) * xq.d[b] * static_cast<float>(s);
  }
  return acc;
}

float dot_q4_1(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  float acc = 0;
  for (int b = 0; b < cols / 32; ++b) {
    const uint8_t* blk = row + 20 * b;
    const int32_t s = nibble_dot(blk + 4, xq.q.data() + 32 * b);
    acc += xq.d[b] * (f16_at(blk) * static_cast<float>(s) + f16_at(blk + 2) * static_cast<float>(xq.sum[b]));
  }
  return acc;
}

// Q4_K super-block of 256: sub-block j is activation block 8*sb + j.
float dot_q4_k(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  float acc = 0;
  for (int sb = 0; sb < cols / 256; ++sb) {
    const uint8_t* blk = row + 144 * sb;
    const float d = f16_at(blk), dmin = f16_at(blk + 2);
    const uint8_t* scales = blk + 4;
    const uint8_t* qs = blk + 16;
    for (int j = 0; j < 8; ++j) {
      int sc, mn;
      q4_k_scale_min(j, scales, sc, mn);
      const int ab = 8 * sb + j;
      const int8_t* qx = xq.q.data() + 32 * ab;
      const uint8_t* q = qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      int32_t s = 0;
      for (int l = 0; l < 32; ++l) s += ((q[l] >> shift) & 0x0F) * qx[l];
      acc += xq.d[ab] * (d * static_cast<float>(sc * s) - dmin * static_cast<float>(mn * xq.sum[ab]));
    }
  }
  return acc;
}

// Q6_K super-block of 256: in half h, element l + 32k (k = 0..3) is activation block 8*sb + 4h + k,
// with scale sc[8h + 2k + l/16].
float dot_q6_k(const uint8_t* row, const float*, const Q8Vector& xq, int cols) {
  float acc = 0;
  for (int sb = 0; sb < cols / 256; ++sb) {
    const uint8_t* blk = row + 210 * sb;
    const float d = f16_at(blk + 208);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk + 64 * h;
      const uint8_t* qh = blk + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192) + 8 * h;
      for (int k = 0; k < 4; ++k) {
        const int ab = 8 * sb + 4 * h + k;
        const int8_t* qx = xq.q.data() + 32 * ab;
        const uint8_t* lo = ql + 32 * (k % 2);
        const int shift = (k / 2) * 4;
        int32_t half_sums[2] = {0, 0}, x_sums[2] = {0, 0};
        for (int l = 0; l < 32; ++l) {
          const uint8_t q = static_cast<uint8_t>(((lo[l] >> shift) & 0x0F) | (((qh[l] >> (2 * k)) & 3) << 4));  // q6 + 32
          half_sums[l / 16] += q * qx[l];
          x_sums[l / 16] += qx[l];
        }
        acc += d * xq.d[ab] *
               static_cast<float>(sc[2 * k] * (half_sums[0] - 32 * x_sums[0]) + sc[2 * k + 1] * (half_sums[1] - 32 * x_sums[1]));
      }
    }
  }
  return acc;
}

}  // namespace

void quantize_q8(const float* x, int n, Q8Vector& out) {
  out.n = n;
  out.q.resize(n);
  out.d.resize(n / kQ8Block);
  out.sum.resize(n / kQ8Block);
  for (int b = 0; b < n / kQ8Block; ++b) {
    const float* xb = x + kQ8Block * b;
    float amax = 0;
    for (int i = 0; i < kQ8Block; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float inv = d > 0 ? 1.0f / d : 0.0f;
    int32_t s = 0;
    for (int i = 0; i < kQ8Block; ++i) {
      const int v = static_cast<int>(std::nearbyint(xb[i] * inv));
      out.q[kQ8Block * b + i] = static_cast<int8_t>(v);
      s += v;
    }
    out.d[b] = d;
    out.sum[b] = s;
  }
}

DotFn scalar_kernel(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return dot_bf16;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q4_K: return dot_q4_k;
    case GgmlType::Q6_K: return dot_q6_k;
    default: return nullptr;
  }
}

}  // namespace kvevict::quant
