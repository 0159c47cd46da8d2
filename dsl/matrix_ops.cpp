#include "dsl/matrix_ops.h"

#include <cmath>

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

}  // namespace kvevict::dsl
