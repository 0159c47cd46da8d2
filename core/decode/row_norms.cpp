// See row_norms.h.
#include "core/decode/row_norms.h"

#include <cstddef>

namespace kvevict {

void compute_row_norms(const float* rows, int T, int d, float* out) {
  for (int t = 0; t < T; ++t) {
    const float* r = rows + static_cast<size_t>(t) * d;
    out[t] = l2_row_norm([r](int i) { return r[i]; }, d);
  }
}

}  // namespace kvevict
