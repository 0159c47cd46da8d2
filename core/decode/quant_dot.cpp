// Run-time kernel choice and the row loops of quant_dot.h.
#include "core/decode/quant_dot.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/model/dequant.h"
#include "core/model/ggml_types.h"

namespace kvevict::quant {
namespace {

Isa detect_isa() {
  Isa isa = Isa::Scalar;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")) isa = Isa::Avx2;
  if (isa == Isa::Avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
    isa = Isa::Avx512Vnni;
  }
#endif
  if (const char* cap = std::getenv("KVEVICT_ISA")) {
    const std::string c = cap;
    if (c == "scalar") isa = Isa::Scalar;
    else if (c == "avx2" && isa == Isa::Avx512Vnni) isa = Isa::Avx2;
  }
  return isa;
}

DotFn kernel(uint32_t type, Isa isa) {
  if (DotFn f = x86_kernel(type, isa)) return f;
  return scalar_kernel(type);
}

}  // namespace

Isa best_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512Vnni: return "avx512-vnni";
  }
  return "?";
}

bool has_kernel(uint32_t type) { return scalar_kernel(type) != nullptr; }

float dot_row(uint32_t type, const uint8_t* row, const float* x, const Q8Vector& xq, int cols, Isa isa) {
  return kernel(type, isa)(row, x, xq, cols);
}

void matvec_rows(const TypedMatrix& w, const float* x, const Q8Vector& xq, int r0, int r1, float* y, Isa isa) {
  const DotFn f = kernel(w.type, isa);
  for (int r = r0; r < r1; ++r) y[r] = f(w.row(r), x, xq, w.cols);
}

void dequantize_rows(const TypedMatrix& w, int r0, int r1, float* dst) {
  if (r1 <= r0) return;
  if (w.type == static_cast<uint32_t>(GgmlType::F32)) {
    std::memcpy(dst, w.row(r0), static_cast<size_t>(r1 - r0) * w.row_bytes);
    return;
  }
  if (const DequantFn f = x86_dequantizer(w.type, best_isa())) {
    for (int r = r0; r < r1; ++r) f(w.row(r), w.cols, dst + static_cast<size_t>(r - r0) * w.cols);
    return;
  }
  dequantize(w.type, w.row(r0), static_cast<uint64_t>(r1 - r0) * w.cols, dst, "", "weights");
}

}  // namespace kvevict::quant
