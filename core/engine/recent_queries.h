#pragma once
// The newest post-RoPE query rows of every layer, as the decoder hands them over block by block
// (LayerSignals::window_queries): a rolling buffer per layer holding at most `keep` rows that are
// contiguous in position. A block that does not continue the rows held (a new prompt) starts the
// layer over (the rule of QueryWindowRing, core/decode/query_window_ring.h, which the CUDA decoder's
// device copy of the same rows follows). The engine's window attention reads the newest W rows from
// here, at prefill and at decode time (CAKE's rolling-window decode indicator, NACL's decode-time
// proxies).
#include <cstddef>
#include <vector>

#include "core/decode/query_window_ring.h"

namespace kvevict {

class RecentQueries {
 public:
  // Forgets everything; rows of `row_floats` floats (n_heads * head_dim).
  void reset(int n_layers, size_t row_floats);
  // Appends `n_rows` rows [n_rows][row_floats] at positions first_position.., then drops the oldest
  // rows beyond `keep`. keep == 0 or n_rows == 0: nothing to hold.
  void record(int layer, const float* rows, int n_rows, int first_position, int keep);

  int rows(int layer) const { return rings_[layer].rows(); }
  int first_position(int layer) const { return rings_[layer].first_position(); }
  const float* data(int layer) const { return data_[layer].data(); }

 private:
  size_t row_floats_ = 0;
  std::vector<std::vector<float>> data_;  // [layer][rows][row_floats]
  std::vector<QueryWindowRing> rings_;
};

}  // namespace kvevict
