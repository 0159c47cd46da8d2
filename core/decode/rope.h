#pragma once
// Rotary position embedding for one head vector. The frequencies follow the model config
// (rope_theta, "linear" or "llama3" scaling) and the pairing convention (AdjacentPairs or
// HalfSplit). Angles are computed in double and rounded to float once, so a table lookup and a
// direct evaluation give identical results; `forward(x, p)` followed by `inverse(x, p)` recovers x
// up to float rounding.
#include <cmath>
#include <vector>

#include "core/model/model_config.h"
#include "core/util/host_device.h"

namespace kvevict {

// The two elements of pair i of a head vector of half * 2 elements, by pairing convention.
KVEVICT_HOST_DEVICE inline void rope_pair_elements(RopeStyle style, int i, int half, int* a, int* b) {
  *a = style == RopeStyle::AdjacentPairs ? 2 * i : i;
  *b = style == RopeStyle::AdjacentPairs ? 2 * i + 1 : i + half;
}

// One pair rotated back by the angle (c, s) (RoPE^-1) and forward by it (RoPE), in f32. Written
// with explicit fused multiply-adds, which no compiler splits or fuses further, so the host and a
// kernel give the same bits from the same table whatever their contraction rules (the host builds
// with -march=native, nvcc fuses by default).
KVEVICT_HOST_DEVICE inline void rope_rotate_pair_back(float* x0, float* x1, float c, float s) {
  const float a = *x0, b = *x1;
  *x0 = fmaf(a, c, b * s);
  *x1 = fmaf(b, c, -(a * s));
}
KVEVICT_HOST_DEVICE inline void rope_rotate_pair_forward(float* x0, float* x1, float c, float s) {
  const float a = *x0, b = *x1;
  *x0 = fmaf(a, c, -(b * s));
  *x1 = fmaf(a, s, b * c);
}

// One pair of a cached key moved from the angle (c0, s0) to the angle (c1, s1): rotated back, then
// forward (the host: KVCache::reassign_positions through Rope::rerotate; the device:
// device_kv_reassign.h).
KVEVICT_HOST_DEVICE inline void rope_rerotate_pair(float* x0, float* x1, float c0, float s0, float c1, float s1) {
  rope_rotate_pair_back(x0, x1, c0, s0);
  rope_rotate_pair_forward(x0, x1, c1, s1);
}

// A Rope's table as plain data (for a kernel's parameters): cos and sin of pair i at position p at
// [p * half + i], for positions [0, positions).
struct RopeTableView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int positions = 0;
  int half = 0;
  RopeStyle style = RopeStyle::AdjacentPairs;
};

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
  // x rotated from position `from` to position `to` (rope_rerotate_pair: the device's bits too).
  void rerotate(float* x, int from, int to) const;
  // The table as reserved so far (valid until the next reserve).
  RopeTableView table() const { return {cos_.data(), sin_.data(), table_positions_, head_dim_ / 2, style_}; }

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
