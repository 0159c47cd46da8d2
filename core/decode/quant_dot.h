#pragma once
// Dot products and matrix-vector products that read ggml weight blocks in place (no f32 copy of the
// weights). The activation vector is quantised once per product to signed 8-bit blocks of 32 values
// (Q8Vector: q = round(x / d), d = max|x| / 127 per block), and each weight block is multiplied
// with it in integers; F16/BF16 rows are converted in registers and multiplied in f32 instead.
// Accuracy (docs/PERFORMANCE.md, "Quantised weights"): against the f32 product of the same
// dequantised weights, |error| <= sum over blocks b of (d_b / 2) * sum_{i in b} |w_i| (the
// activation rounding; plus f32 rounding), checked by tests/core/quant_dot_test.cpp.
// Kernels: a portable scalar one per format (the reference), and AVX2 and AVX-512 VNNI ones for
// Q4_0, Q4_1, Q8_0, F16, BF16 (quant_dot_x86.cpp), Q4_K and Q6_K (quant_dot_x86_k.cpp), chosen once
// at run time from cpuid (best_isa()).
#include <cstdint>
#include <vector>

#include "core/model/weights.h"

namespace kvevict::quant {

constexpr int kQ8Block = 32;

struct Q8Vector {
  int n = 0;                  // elements (a multiple of kQ8Block)
  std::vector<int8_t> q;      // [n]
  std::vector<float> d;       // [n / 32] scale per block
  std::vector<int32_t> sum;   // [n / 32] sum of q per block
};
// Quantises x[0..n) (n a multiple of 32).
void quantize_q8(const float* x, int n, Q8Vector& out);

enum class Isa { Scalar, Avx2, Avx512Vnni };
Isa best_isa();  // detected once (cpuid); KVEVICT_ISA=scalar|avx2 in the environment caps it
const char* isa_name(Isa isa);

// Whether `type` has a matvec kernel (F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K).
bool has_kernel(uint32_t type);

// Dot of one row of `cols` elements of `type` with x; quantised types read xq (= quantize_q8(x)),
// F32/F16/BF16 read x.
float dot_row(uint32_t type, const uint8_t* row, const float* x, const Q8Vector& xq, int cols, Isa isa);

// y[r] = W[r] . x for r in [r0, r1) (y indexed by r).
void matvec_rows(const TypedMatrix& w, const float* x, const Q8Vector& xq, int r0, int r1, float* y, Isa isa);

// Rows [r0, r1) of w dequantised into dst, [r1 - r0][cols].
void dequantize_rows(const TypedMatrix& w, int r0, int r1, float* dst);

// Per-ISA kernels (quant_dot_x86.cpp); nullptr when the ISA has none for the type.
using DotFn = float (*)(const uint8_t* row, const float* x, const Q8Vector& xq, int cols);
DotFn x86_kernel(uint32_t type, Isa isa);
// Vectorised row dequantisers (quant_dot_x86.cpp) used by dequantize_rows; nullptr where the
// scalar dequantize() is used.
using DequantFn = void (*)(const uint8_t* row, int cols, float* dst);
DequantFn x86_dequantizer(uint32_t type, Isa isa);
// Portable reference kernels (quant_dot_scalar.cpp).
DotFn scalar_kernel(uint32_t type);

}  // namespace kvevict::quant
