// The download of a decoder's device column sums; contract in column_sums_signal.h.
#include "core/decode/column_sums_signal.h"

#include <stdexcept>

#include "core/util/error.h"
#ifdef KVEVICT_HAVE_CUDA
#include "core/decode/cuda/window_attention.h"
#endif

namespace kvevict {

void download_column_sums(const ColumnSumsSignal& c, std::vector<float>& host) {
  if (c.empty()) throw std::invalid_argument("download_column_sums: no device column sums");
  host.resize(c.floats());
#ifdef KVEVICT_HAVE_CUDA
  cuda::download_floats(c.data, host.size(), host.data());
#else
  throw RuntimeError("column sums: a device buffer in a build without CUDA");
#endif
}

}  // namespace kvevict
