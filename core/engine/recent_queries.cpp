// See recent_queries.h.
#include "core/engine/recent_queries.h"

namespace kvevict {

void RecentQueries::reset(int n_layers, size_t row_floats) {
  row_floats_ = row_floats;
  data_.assign(n_layers, {});
  rings_.assign(n_layers, {});
}

void RecentQueries::record(int layer, const float* rows, int n_rows, int first_position, int keep) {
  if (keep == 0 || n_rows == 0) return;
  apply_query_window_update(rings_[layer].append(first_position, n_rows, keep), data_[layer], rows, row_floats_);
}

}  // namespace kvevict
