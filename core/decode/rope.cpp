#include "core/decode/rope.h"

#include <cmath>

namespace kvevict {

namespace {

// Llama 3.1 rope scaling: long wavelengths are divided by `factor`, short ones kept, and the band
// in between interpolated smoothly (as the published Llama 3.1 configs define it).
double llama3_scaled(double freq, const RopeScaling& s) {
  const double kPi = 3.14159265358979323846;
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  const double wavelen = 2.0 * kPi / freq;
  if (wavelen < high_wavelen) return freq;
  if (wavelen > low_wavelen) return freq / s.factor;
  const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * freq / s.factor + smooth * freq;
}

}  // namespace

Rope::Rope(const ModelConfig& config) : head_dim_(config.head_dim), style_(config.rope_style) {
  const int half = head_dim_ / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(config.rope_theta), -2.0 * i / head_dim_);
    if (config.rope_scaling.type == "linear") {
      freq /= config.rope_scaling.factor;  // positions / factor
    } else if (config.rope_scaling.type == "llama3") {
      freq = llama3_scaled(freq, config.rope_scaling);
    }
    inv_freq_[i] = freq;
  }
}

void Rope::pair_cos_sin(int position, int i, float* c, float* s) const {
  if (position < table_positions_) {
    const size_t k = static_cast<size_t>(position) * (head_dim_ / 2) + i;
    *c = cos_[k];
    *s = sin_[k];
    return;
  }
  const double angle = static_cast<double>(position) * inv_freq_[i];
  *c = static_cast<float>(std::cos(angle));
  *s = static_cast<float>(std::sin(angle));
}

void Rope::reserve(int n_positions) {
  if (n_positions <= table_positions_) return;
  const int half = head_dim_ / 2;
  cos_.resize(static_cast<size_t>(n_positions) * half);
  sin_.resize(static_cast<size_t>(n_positions) * half);
  for (int p = table_positions_; p < n_positions; ++p) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq_[i];
      cos_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::cos(angle));
      sin_[static_cast<size_t>(p) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  table_positions_ = n_positions;
}

void Rope::rotate(float* x, int position, float sign) const {
  const int half = head_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    float c, s;
    pair_cos_sin(position, i, &c, &s);
    s *= sign;
    int a, b;
    rope_pair_elements(style_, i, half, &a, &b);
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
}

void Rope::rerotate(float* x, int from, int to) const {
  const int half = head_dim_ / 2;
  for (int i = 0; i < half; ++i) {
    float c0, s0, c1, s1;
    pair_cos_sin(from, i, &c0, &s0);
    pair_cos_sin(to, i, &c1, &s1);
    int a, b;
    rope_pair_elements(style_, i, half, &a, &b);
    rope_rerotate_pair(&x[a], &x[b], c0, s0, c1, s1);
  }
}

}  // namespace kvevict
