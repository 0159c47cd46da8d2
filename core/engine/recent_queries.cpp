#include "core/engine/recent_queries.h"

namespace kvevict {

void RecentQueries::reset(int n_layers, size_t row_floats) {
  row_floats_ = row_floats;
  data_.assign(n_layers, {});
  rows_.assign(n_layers, 0);
  first_position_.assign(n_layers, 0);
}

void RecentQueries::record(int layer, const float* rows, int n_rows, int first_position, int keep) {
  if (keep == 0 || n_rows == 0) return;
  std::vector<float>& q = data_[layer];
  if (rows_[layer] > 0 && first_position_[layer] + rows_[layer] != first_position) {
    q.clear();  // not contiguous (a new prompt): start over
    rows_[layer] = 0;
  }
  if (rows_[layer] == 0) first_position_[layer] = first_position;
  q.insert(q.end(), rows, rows + static_cast<size_t>(n_rows) * row_floats_);
  rows_[layer] += n_rows;
  if (rows_[layer] > keep) {
    const int drop = rows_[layer] - keep;
    q.erase(q.begin(), q.begin() + static_cast<size_t>(drop) * row_floats_);
    rows_[layer] = keep;
    first_position_[layer] += drop;
  }
}

}  // namespace kvevict
