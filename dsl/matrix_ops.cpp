#include "dsl/matrix_ops.h"

#include <cmath>
#include <string>

#include "core/engine/gaussian_rng.h"
#include "core/util/error.h"
#include "dsl/lowered.h"

namespace kvevict::dsl {
namespace {

using std::sqrt;
KVEVICT_DEFINE_SPD_INVERSE(inline)

}  // namespace

int spd_inverse(const float* m, int n, std::vector<double>& work, float* out) {
  if (n < 1 || n > kMaxMatrixDim) {  // callers check first; never index out of bounds or allocate
    for (int64_t i = 0; n > 0 && i < static_cast<int64_t>(n) * n; ++i) out[i] = std::nanf("");
    return -1;
  }
  work.resize(static_cast<size_t>(n) * static_cast<size_t>(n));
  return kv_spd_inverse(m, n, work.data(), out);
}

InverseReport spd_inverse_batched(const float* m, int64_t batch, int n, float* out) {
  InverseReport r;
  if (batch <= 0 || n < 1) return r;
  const int64_t nn = static_cast<int64_t>(n) * n;
  int64_t jittered = 0, failed = 0;
  // One matrix per iteration, each with its own work space: the results are the same bits
  // whatever the thread count.
#pragma omp parallel reduction(+ : jittered, failed) if (batch > 1 && batch * nn * n >= (int64_t(1) << 22))
  {
    std::vector<double> work;
#pragma omp for schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      const int step = spd_inverse(m + b * nn, n, work, out + b * nn);
      if (step < 0) ++failed;
      else if (step > 0) ++jittered;
    }
  }
  r.jittered = jittered;
  r.failed = failed;
  return r;
}

std::string inverse_operand_error(unsigned shape, bool layer_weight_program) {
  if (layer_weight_program) return "'inverse' is not available in layer_weight programs";
  const unsigned matrix = kAxisD | kAxisE;
  if ((shape & matrix) != matrix)
    return "'inverse' inverts a matrix over the channel axes d and e; its argument has shape " + shape_name(shape) +
           " (write e.g. inverse(C[d, e]) with C[d, e] = sum(t: X[d, t] * X[e, t]))";
  if (shape & (kAxisS | kAxisT))
    return "'inverse' takes one matrix per head, not per token; its argument has shape " + shape_name(shape) +
           " (reduce over the token axis first)";
  return "";
}

void evaluate_inverse(const float* operand, int64_t elements, int head_dim, float* out) {
  if (head_dim > kMaxMatrixDim)
    throw RuntimeError("inverse(): head_dim " + std::to_string(head_dim) + " exceeds the largest matrix the language inverts (" +
                       std::to_string(kMaxMatrixDim) + ")");
  if (head_dim < 1 || elements <= 0) return;
  const int64_t nn = static_cast<int64_t>(head_dim) * head_dim;
  spd_inverse_batched(operand, elements / nn, head_dim, out);
}

void evaluate_randn(uint64_t seed, uint32_t layer, uint32_t kv_head, int head_dim, float* out) {
  for (int d = 0; d < head_dim; ++d)
    for (int e = 0; e < head_dim; ++e)
      out[static_cast<int64_t>(d) * head_dim + e] =
          kv_dsl_randn(seed, layer, kv_head, static_cast<uint32_t>(d), static_cast<uint32_t>(e));
}

}  // namespace kvevict::dsl
