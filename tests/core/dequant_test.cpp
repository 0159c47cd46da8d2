// Dequantisation of hand-built blocks. Expected values are computed per element from the format
// descriptions (which byte and bit an element lives in), not by re-running kvevict's block loops.
#include "core/model/dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/util/error.h"

namespace kvevict {
namespace {

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

std::vector<float> run(uint32_t type, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, -999.0f);
  dequantize(type, bytes.data(), n, out.data(), "test.gguf", "t");
  return out;
}

TEST(Dequant, HalfBitPatterns) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));        // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x03FF), 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));        // smallest normal
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)) && fp16_to_float(0x7C00) > 0);
  EXPECT_TRUE(std::isinf(fp16_to_float(0xFC00)) && fp16_to_float(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
}

TEST(Dequant, F32F16BF16) {
  std::vector<uint8_t> f32(8);
  const float a[2] = {1.5f, -7.25f};
  std::memcpy(f32.data(), a, 8);
  EXPECT_EQ(run(0, f32, 2), (std::vector<float>{1.5f, -7.25f}));

  std::vector<uint8_t> f16(6);
  put_u16(f16, 0, 0x3C00);
  put_u16(f16, 2, 0xC500);  // -5
  put_u16(f16, 4, 0x3400);  // 0.25
  EXPECT_EQ(run(1, f16, 3), (std::vector<float>{1.0f, -5.0f, 0.25f}));

  std::vector<uint8_t> bf16(6);
  put_u16(bf16, 0, 0x3F80);  // 1
  put_u16(bf16, 2, 0xC040);  // -3
  put_u16(bf16, 4, 0x4049);  // 3.140625
  EXPECT_EQ(run(30, bf16, 3), (std::vector<float>{1.0f, -3.0f, 3.140625f}));
}

TEST(Dequant, Q8_0TwoBlocks) {
  std::vector<uint8_t> b(68);
  put_u16(b, 0, 0x3800);   // d = 0.5
  put_u16(b, 34, 0xBC00);  // d = -1
  for (int i = 0; i < 32; ++i) {
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 8 - 128));
    b[36 + i] = static_cast<uint8_t>(static_cast<int8_t>(127 - i));
  }
  const auto y = run(8, b, 64);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y[i], 0.5f * (i * 8 - 128)) << i;
    EXPECT_EQ(y[32 + i], -1.0f * (127 - i)) << i;
  }
}

// Q4_0 / Q4_1: element e < 16 is the low nibble of byte e, element e >= 16 the high nibble of byte e-16.
std::vector<uint8_t> pack_nibbles(const int (&q)[32]) {
  std::vector<uint8_t> qs(16, 0);
  for (int e = 0; e < 32; ++e) {
    if (e < 16) qs[e] |= static_cast<uint8_t>(q[e]);
    else qs[e - 16] |= static_cast<uint8_t>(q[e] << 4);
  }
  return qs;
}

TEST(Dequant, Q4_0) {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (e * 7 + 3) % 16;
  std::vector<uint8_t> b(18);
  put_u16(b, 0, 0x3400);  // d = 0.25
  const auto qs = pack_nibbles(q);
  std::copy(qs.begin(), qs.end(), b.begin() + 2);
  const auto y = run(2, b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.25f * (q[e] - 8)) << e;
}

TEST(Dequant, Q4_1) {
  int q[32];
  for (int e = 0; e < 32; ++e) q[e] = (e * 5 + 11) % 16;
  std::vector<uint8_t> b(20);
  put_u16(b, 0, 0x3000);  // d = 0.125
  put_u16(b, 2, 0xBE00);  // m = -1.5
  const auto qs = pack_nibbles(q);
  std::copy(qs.begin(), qs.end(), b.begin() + 4);
  const auto y = run(3, b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.125f * q[e] - 1.5f) << e;
}

// Q4_K: d, dmin, 12 scale bytes, 128 nibble bytes. Sub-block j = e / 32 has a 6-bit scale and min.
TEST(Dequant, Q4_K) {
  const int sc[8] = {1, 5, 17, 33, 63, 40, 2, 60};
  const int mn[8] = {0, 3, 62, 7, 31, 48, 9, 16};
  std::vector<uint8_t> b(144, 0);
  put_u16(b, 0, 0x3800);  // d = 0.5
  put_u16(b, 2, 0x3400);  // dmin = 0.25
  uint8_t* s = b.data() + 4;
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] |= static_cast<uint8_t>(sc[j]);        // low 6 bits of byte j
      s[j + 4] |= static_cast<uint8_t>(mn[j]);    // low 6 bits of byte j+4
    } else {
      s[j + 4] |= static_cast<uint8_t>((sc[j] & 15) | ((mn[j] & 15) << 4));  // byte 8..11
      s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);                    // top bits of bytes 0..3
      s[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);                        // top bits of bytes 4..7
    }
  }
  int q[256];
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 11 + e / 7) % 16;
    const int group = e / 64, r = e % 64;
    uint8_t& byte = b[16 + 32 * group + r % 32];
    byte |= static_cast<uint8_t>(r < 32 ? q[e] : q[e] << 4);
  }
  const auto y = run(12, b, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.5f * sc[j] * q[e] - 0.25f * mn[j]) << e;
  }
}

// Q6_K: ql[128], qh[64], int8 scales[16], d. Element e: half h = e/128, quarter = (e%128)/32, l = e%32;
// low 4 bits in ql[64h + l + 32*(quarter&1)] (high nibble when quarter >= 2), high 2 bits in
// qh[32h + l] at bit 2*quarter; scale index e / 16; x = d * scale * (q - 32).
TEST(Dequant, Q6_K) {
  std::vector<uint8_t> b(210, 0);
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(i * 17 - 120);
  std::memcpy(b.data() + 192, scales, 16);
  put_u16(b, 208, 0x3800);  // d = 0.5
  int q[256];
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 13 + 5) % 64;
    const int h = e / 128, quarter = (e % 128) / 32, l = e % 32;
    uint8_t& low = b[64 * h + l + 32 * (quarter & 1)];
    low |= static_cast<uint8_t>(quarter >= 2 ? (q[e] & 15) << 4 : (q[e] & 15));
    b[128 + 32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * quarter));
  }
  const auto y = run(14, b, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * scales[e / 16] * (q[e] - 32)) << e;
}

TEST(Dequant, TensorBytes) {
  EXPECT_EQ(ggml_tensor_bytes(3, 64, "f", "t"), 40u);    // Q4_1: 2 blocks x 20
  EXPECT_EQ(ggml_tensor_bytes(14, 512, "f", "t"), 420u); // Q6_K: 2 x 210
  EXPECT_EQ(ggml_tensor_bytes(30, 3, "f", "t"), 6u);
  EXPECT_THROW(ggml_tensor_bytes(8, 33, "f", "t"), ModelError);
}

TEST(Dequant, UnsupportedAndUnknownTypesNameTensorAndType) {
  std::vector<uint8_t> b(176, 0);
  std::vector<float> out(256);
  try {
    dequantize(13, b.data(), 256, out.data(), "m.gguf", "blk.3.ffn_up.weight");
    FAIL() << "Q5_K accepted";
  } catch (const ModelError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("m.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find("blk.3.ffn_up.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q5_K"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Q6_K"), std::string::npos) << msg;  // lists the supported types
  }
  try {
    dequantize(99, b.data(), 1, out.data(), "m.gguf", "odd");
    FAIL() << "type 99 accepted";
  } catch (const ModelError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("odd"), std::string::npos) << msg;
    EXPECT_NE(msg.find("99"), std::string::npos) << msg;
  }
}

// first_non_finite: the first infinity or NaN of a matrix kept in its file format, by row-major
// index, for F16 and BF16 read as bit patterns and Q8_0 through dequantize; padding between rows
// (row_bytes past the values, filled with infinity patterns here) is never read; the answer is the
// same for 1 and 3 threads.
TEST(Dequant, FirstNonFiniteFindsTheFirstInfinityOrNaNInRowOrder) {
  const int default_threads = omp_get_max_threads();
  const uint64_t rows = 37, cols = 45;
  for (const bool bf16 : {false, true}) {
    const uint32_t type = bf16 ? 30 : 1;
    const uint16_t inf = bf16 ? 0x7F80 : 0x7C00, nan = bf16 ? 0x7FC1 : 0x7E01, max = bf16 ? 0x7F7F : 0x7BFF;
    const size_t row_bytes = 2 * cols + 6;
    std::vector<uint8_t> m(rows * row_bytes);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) {
        // Finite patterns of every kind: zeros of both signs, subnormals, the largest finite.
        const uint16_t finite[] = {0x0000, 0x8000, 0x0001, 0x83FF, max, static_cast<uint16_t>(max | 0x8000), 0x3C00};
        put_u16(m, r * row_bytes + 2 * c, finite[(r * 7 + c) % 7]);
      }
      for (size_t p = 2 * cols; p < row_bytes; p += 2) put_u16(m, r * row_bytes + p, inf);  // padding: never read
    }
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(first_non_finite(type, m.data(), rows, cols, row_bytes, "f", "t"), -1) << bf16 << " " << threads;
    }
    put_u16(m, 20 * row_bytes + 2 * 44, inf);
    put_u16(m, 31 * row_bytes + 2 * 3, static_cast<uint16_t>(nan | 0x8000));
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(first_non_finite(type, m.data(), rows, cols, row_bytes, "f", "t"), int64_t(20 * cols + 44));
    }
    put_u16(m, 5 * row_bytes, nan);
    for (int threads : {1, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(first_non_finite(type, m.data(), rows, cols, row_bytes, "f", "t"), int64_t(5 * cols));
    }
  }
  // Q8_0 (type 8; blocks of an F16 scale and 32 int8): a NaN scale makes its block non-finite.
  const uint64_t qcols = 64;
  const size_t qrow = 2 * 34;
  std::vector<uint8_t> q(3 * qrow, 1);
  for (uint64_t r = 0; r < 3; ++r)
    for (int b = 0; b < 2; ++b) put_u16(q, r * qrow + 34 * b, 0x3C00);
  EXPECT_EQ(first_non_finite(8, q.data(), 3, qcols, qrow, "f", "t"), -1);
  put_u16(q, 2 * qrow + 34, 0x7E00);  // row 2, second block
  EXPECT_EQ(first_non_finite(8, q.data(), 3, qcols, qrow, "f", "t"), int64_t(2 * qcols + 32));
  omp_set_num_threads(default_threads);
}

}  // namespace
}  // namespace kvevict
