// The download of a decoder's device column sums; contract in column_sums_signal.h.
#include "core/decode/column_sums_signal.h"

#include <stdexcept>

#include "core/decode/device_download.h"

namespace kvevict {

void download_column_sums(const ColumnSumsSignal& c, std::vector<float>& host) {
  if (c.empty()) throw std::invalid_argument("download_column_sums: no device column sums");
  download_device_floats(c.data, c.floats(), host, "column sums");
}

}  // namespace kvevict
