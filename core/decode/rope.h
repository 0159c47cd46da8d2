#pragma once
// Rotary position embedding for one head vector. The frequencies follow the model config
// (rope_theta, "linear" or "llama3" scaling) and the pairing convention (AdjacentPairs or
// HalfSplit). Angles are computed in double and rounded to float once, so a table lookup and a
// direct evaluation give identical results; `forward(x, p)` followed by `inverse(x, p)` recovers x
// up to float rounding.
#include <vector>

#include "core/model/model_config.h"

namespace kvevict {

class Rope {
 public:
  Rope() = default;
  explicit Rope(const ModelConfig& config);

  int head_dim() const { return head_dim_; }
  // Scaled inverse frequency of pair i (i < head_dim / 2).
  double inverse_frequency(int i) const { return inv_freq_[i]; }

  // Precomputes cos/sin for positions [0, n_positions); later calls only grow the table.
  // Not thread-safe: call it before rotating from several threads.
  void reserve(int n_positions);

  void forward(float* x, int position) const { rotate(x, position, 1.0f); }
  void inverse(float* x, int position) const { rotate(x, position, -1.0f); }

 private:
  void rotate(float* x, int position, float sign) const;
  void pair_cos_sin(int position, int i, float* c, float* s) const;

  int head_dim_ = 0;
  RopeStyle style_ = RopeStyle::AdjacentPairs;
  std::vector<double> inv_freq_;
  int table_positions_ = 0;
  std::vector<float> cos_, sin_;  // [position][head_dim / 2]
};

}  // namespace kvevict
