// One-token matrix-vector product (core/decode/quant_dot.h) per weight format and per ISA path
// available on this CPU, at SmolLM2-135M's FFN shapes (1536 x 576 and 576 x 1536), one thread.
//   bench_quant_dot [REPEATS]    (default 2000 products per shape, format and ISA)
// Prints the time per product and the ratio to the scalar kernel; on a shared machine only the
// ratios (taken back to back) mean anything. Q4_K and Q6_K rows hold whole 256-element
// super-blocks, so they run only on the 576 x 1536 shape (ggml files store 576-column tensors in
// other formats). The weights are N(0, 0.05) rounded into blocks by the
// test encoder (tests/core/quant_block_writer.h); the kernels' cost does not depend on the values.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "../tests/core/quant_block_writer.h"
#include "bench_common.h"
#include "core/decode/quant_dot.h"
#include "core/model/dequant.h"
#include "core/model/ggml_types.h"

using namespace kvevict;

namespace {

struct Shape {
  int rows, cols;
};

double seconds_per_product(const TypedMatrix& w, const std::vector<float>& x, const quant::Q8Vector& xq,
                           std::vector<float>& y, quant::Isa isa, int repeats) {
  quant::matvec_rows(w, x.data(), xq, 0, w.rows, y.data(), isa);  // warm the caches
  const double t0 = bench::process_cpu_seconds();
  for (int i = 0; i < repeats; ++i) quant::matvec_rows(w, x.data(), xq, 0, w.rows, y.data(), isa);
  return (bench::process_cpu_seconds() - t0) / repeats;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 2000;
  if (repeats <= 0) {
    std::fprintf(stderr, "usage: bench_quant_dot [REPEATS > 0]\n");
    return 2;
  }
  const uint32_t types[] = {2, 3, 8, 12, 14, 1, 30};  // Q4_0 Q4_1 Q8_0 Q4_K Q6_K F16 BF16
  const Shape shapes[] = {{1536, 576}, {576, 1536}};
  std::vector<quant::Isa> isas = {quant::Isa::Scalar};
  if (quant::best_isa() >= quant::Isa::Avx2) isas.push_back(quant::Isa::Avx2);
  if (quant::best_isa() >= quant::Isa::Avx512Vnni) isas.push_back(quant::Isa::Avx512Vnni);
  std::printf("best ISA: %s; %d products each, CPU time per product (1 thread)\n", quant::isa_name(quant::best_isa()),
              repeats);
  std::printf("%-6s %-10s %-12s %10s %8s\n", "format", "shape", "isa", "us", "scalar/x");
  for (const Shape& s : shapes) {
    std::mt19937 rng(1);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> x(s.cols), values(static_cast<size_t>(s.rows) * s.cols);
    for (float& v : x) v = g(rng);
    for (float& v : values) v = 0.05f * g(rng);
    quant::Q8Vector xq;
    quant::quantize_q8(x.data(), s.cols, xq);
    std::vector<float> y(s.rows);
    for (uint32_t type : types) {
      if (s.cols % ggml_type_traits(type)->block_elements != 0) continue;  // K-quants need rows of 256k
      const std::vector<uint8_t> bytes = test::encode_blocks(type, values);
      TypedMatrix w;
      w.type = type;
      w.rows = s.rows;
      w.cols = s.cols;
      w.row_bytes = ggml_tensor_bytes(type, s.cols, "bench", "w");
      w.data = bytes.data();
      double scalar = 0;
      for (quant::Isa isa : isas) {
        const double t = seconds_per_product(w, x, xq, y, isa, repeats);
        if (isa == quant::Isa::Scalar) scalar = t;
        std::printf("%-6s %4dx%-5d %-12s %10.2f %8.2f\n", ggml_type_name(type).c_str(), s.rows, s.cols, quant::isa_name(isa),
                    1e6 * t, scalar / t);
      }
    }
  }
  return 0;
}
