// The quantised matvec kernels (core/decode/quant_dot.h) against the f32 product of the same
// dequantised weights: within the activation-rounding bound for every format, the SIMD kernels equal
// to the scalar reference up to f32 summation order, and the block product (tile dequantisation +
// sgemm) equal to sgemm on the dequantised matrix.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/decode/cpu_ops.h"
#include "core/decode/quant_dot.h"
#include "core/model/dequant.h"
#include "core/model/ggml_types.h"
#include "quant_block_writer.h"

namespace kvevict {
namespace {

struct Format {
  uint32_t type;
  double roundtrip_rms;  // relative RMS error of encode -> dequantize on N(0, 1) data
};
const Format kFormats[] = {{1, 1e-3}, {30, 5e-3}, {2, 0.15}, {3, 0.12}, {8, 0.01}, {12, 0.12}, {14, 0.05}};

std::vector<float> normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

TypedMatrix matrix_of(uint32_t type, const std::vector<uint8_t>& bytes, int rows, int cols) {
  TypedMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = ggml_tensor_bytes(type, cols, "test", "m");
  m.data = bytes.data();
  return m;
}

TEST(QuantBlockWriter, RoundTrip) {
  for (const Format& f : kFormats) {
    const std::vector<float> x = normal(1024, 7 + f.type);
    const std::vector<uint8_t> bytes = test::encode_blocks(f.type, x);
    ASSERT_EQ(bytes.size(), ggml_tensor_bytes(f.type, x.size(), "test", "x"));
    std::vector<float> y(x.size());
    dequantize(f.type, bytes.data(), x.size(), y.data(), "test", "x");
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (x[i] - y[i]) * (x[i] - y[i]);
      norm += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / norm), f.roundtrip_rms) << ggml_type_name(f.type);
  }
}

TEST(QuantDot, Q8ActivationRounding) {
  const std::vector<float> x = normal(256, 3);
  quant::Q8Vector q;
  quant::quantize_q8(x.data(), 256, q);
  for (int b = 0; b < 8; ++b) {
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(x[32 * b + i] - q.d[b] * q.q[32 * b + i]), q.d[b] * 0.5f * (1 + 1e-5f));
      sum += q.q[32 * b + i];
    }
    EXPECT_EQ(sum, q.sum[b]);
  }
}

// Every kernel of every format, one row at a time, against the double-precision dot of the
// dequantised row with x. Quantised formats may differ by the activation rounding,
// sum_b (d_b / 2) sum_{i in b} |w_i|; F16/BF16 read x in f32 and differ only by f32 rounding.
TEST(QuantDot, WithinTheActivationBound) {
  const int cols = 512, rows = 16;
  std::vector<quant::Isa> isas = {quant::Isa::Scalar};
  if (quant::best_isa() >= quant::Isa::Avx2) isas.push_back(quant::Isa::Avx2);
  if (quant::best_isa() >= quant::Isa::Avx512Vnni) isas.push_back(quant::Isa::Avx512Vnni);
  for (const Format& f : kFormats) {
    const std::vector<uint8_t> bytes = test::encode_blocks(f.type, normal(size_t(rows) * cols, 11 + f.type, 0.05f));
    const TypedMatrix w = matrix_of(f.type, bytes, rows, cols);
    const std::vector<float> x = normal(cols, 5);
    quant::Q8Vector xq;
    quant::quantize_q8(x.data(), cols, xq);
    const bool integer = f.type != 1 && f.type != 30;
    std::vector<float> wr(cols);
    for (int r = 0; r < rows; ++r) {
      quant::dequantize_rows(w, r, r + 1, wr.data());
      double ref = 0, magnitude = 0, bound = 0;
      for (int i = 0; i < cols; ++i) {
        ref += double(wr[i]) * x[i];
        magnitude += std::fabs(double(wr[i]) * x[i]);
        if (integer) bound += xq.d[i / 32] * 0.5 * std::fabs(wr[i]);
      }
      bound += 1e-5 * magnitude + 1e-6;
      const float scalar = quant::dot_row(f.type, w.row(r), x.data(), xq, cols, quant::Isa::Scalar);
      for (quant::Isa isa : isas) {
        const float got = quant::dot_row(f.type, w.row(r), x.data(), xq, cols, isa);
        EXPECT_LE(std::fabs(got - ref), bound) << ggml_type_name(f.type) << " " << quant::isa_name(isa) << " row " << r;
        // The integer block sums are exact: SIMD and scalar differ only in the f32 summation order.
        EXPECT_NEAR(got, scalar, 1e-5 * magnitude + 1e-6) << ggml_type_name(f.type) << " " << quant::isa_name(isa);
      }
    }
  }
}

// The SIMD kernels on block bytes the test encoder never writes: random bytes (every scale bit of
// Q4_K's packed scales, negative Q6_K scales), all 0xFF (Q6_K q = 63, Q4_K scales and mins 63) and
// all 0x00, against activations at the int8 extremes (every q = +127, or +-127 at random): the
// largest maddubs pair sums (2 * 63 * 127 for Q6_K) must not saturate, so SIMD = scalar up to f32
// summation order. Half-precision scale fields are set to 0.01 so every row is finite.
TEST(QuantDot, SimdKernelsMatchTheScalarOnExtremeBlocks) {
  struct Layout {
    uint32_t type;
    int block_bytes;
    std::vector<int> half_fields;  // byte offsets of f16 scales in a block
  };
  const Layout layouts[] = {{2, 18, {0}}, {3, 20, {0, 2}}, {8, 34, {0}}, {12, 144, {0, 2}}, {14, 210, {208}}};
  const int cols = 512;
  std::vector<quant::Isa> isas;
  if (quant::best_isa() >= quant::Isa::Avx2) isas.push_back(quant::Isa::Avx2);
  if (quant::best_isa() >= quant::Isa::Avx512Vnni) isas.push_back(quant::Isa::Avx512Vnni);
  if (isas.empty()) GTEST_SKIP() << "no SIMD path on this CPU";
  std::mt19937 rng(41);
  std::vector<std::vector<float>> activations(3, std::vector<float>(cols, 1.0f));
  for (float& v : activations[1]) v = (rng() & 1) ? 1.0f : -1.0f;
  activations[2] = normal(cols, 43);
  for (const Layout& l : layouts) {
    const int block_elements = static_cast<int>(ggml_type_traits(l.type)->block_elements);
    const size_t row_bytes = size_t(cols / block_elements) * l.block_bytes;
    for (int fill = 0; fill < 3; ++fill) {  // random, 0xFF, 0x00
      std::vector<uint8_t> bytes(row_bytes);
      for (uint8_t& b : bytes) b = fill == 0 ? static_cast<uint8_t>(rng()) : fill == 1 ? 0xFF : 0x00;
      for (size_t b = 0; b < row_bytes; b += l.block_bytes) {
        for (int off : l.half_fields) {
          const uint16_t h = test::to_half(0.01f);
          bytes[b + off] = static_cast<uint8_t>(h & 0xFF);
          bytes[b + off + 1] = static_cast<uint8_t>(h >> 8);
        }
      }
      const TypedMatrix w = matrix_of(l.type, bytes, 1, cols);
      std::vector<float> wr(cols);
      quant::dequantize_rows(w, 0, 1, wr.data());
      for (const std::vector<float>& x : activations) {
        quant::Q8Vector xq;
        quant::quantize_q8(x.data(), cols, xq);
        double magnitude = 0;
        for (int i = 0; i < cols; ++i) magnitude += std::fabs(double(wr[i]) * x[i]);
        const float scalar = quant::dot_row(l.type, w.row(0), x.data(), xq, cols, quant::Isa::Scalar);
        for (quant::Isa isa : isas) {
          const float got = quant::dot_row(l.type, w.row(0), x.data(), xq, cols, isa);
          EXPECT_NEAR(got, scalar, 1e-5 * magnitude + 1e-6)
              << ggml_type_name(l.type) << " " << quant::isa_name(isa) << " fill " << fill;
        }
      }
    }
  }
}

// dequantize_rows (vectorised per format where best_isa() allows) against the scalar dequantize():
// the same values up to one f32 rounding (a fused multiply-add where the scalar code may round twice).
TEST(QuantDot, RowDequantisationMatchesTheReference) {
  const int rows = 8, cols = 512;
  for (const Format& f : kFormats) {
    const std::vector<uint8_t> bytes = test::encode_blocks(f.type, normal(size_t(rows) * cols, 29 + f.type));
    const TypedMatrix w = matrix_of(f.type, bytes, rows, cols);
    std::vector<float> want(size_t(rows) * cols), got(want.size());
    dequantize(f.type, bytes.data(), want.size(), want.data(), "test", "w");
    quant::dequantize_rows(w, 2, rows, got.data());
    for (size_t i = 0; i < got.size() - 2 * cols; ++i) {
      ASSERT_NEAR(got[i], want[i + 2 * cols], 2.4e-7f * std::fabs(want[i + 2 * cols]) + 1e-12f) << ggml_type_name(f.type) << " " << i;
    }
  }
}

// The block product dequantises tiles of kTileFloats values (cols = 8192: 128-row tiles, so a
// thread's 304-row slice is two tiles and a tail) and the one-token product splits rows over
// threads; both against the dequantised matrix.
TEST(QuantMatmul, BlocksAndTokensMatchTheDequantisedMatrix) {
  const int rows = 600, cols = 8192, n = 3;  // above the parallel threshold even for n = 1
  for (const Format& f : kFormats) {
    const std::vector<uint8_t> bytes = test::encode_blocks(f.type, normal(size_t(rows) * cols, 17 + f.type, 0.05f));
    const TypedMatrix w = matrix_of(f.type, bytes, rows, cols);
    std::vector<float> dense(size_t(rows) * cols);
    quant::dequantize_rows(w, 0, rows, dense.data());
    const std::vector<float> x = normal(size_t(n) * cols, 23);
    std::vector<float> want(size_t(n) * rows), got(want.size());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, rows, cols, 1.0f, x.data(), cols, dense.data(), cols, 0.0f,
                want.data(), rows);
    cpu::set_threads(2);
    cpu::matmul(x.data(), n, w, got.data());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << ggml_type_name(f.type) << " " << i;
    }

    std::vector<float> one(rows), rowwise(rows);
    cpu::matmul(x.data(), 1, w, one.data());
    quant::Q8Vector xq;
    quant::quantize_q8(x.data(), cols, xq);
    quant::matvec_rows(w, x.data(), xq, 0, rows, rowwise.data(), quant::best_isa());
    for (int r = 0; r < rows; ++r) EXPECT_EQ(one[r], rowwise[r]) << ggml_type_name(f.type) << " row " << r;
  }
}

}  // namespace
}  // namespace kvevict
