#pragma once
// TOVA's layer-shared score (spec policies.md §5.3): one decision per layer on the mean of its KV
// heads' scores, every head of the same length T. The element body below is the one rule, used by
// the host engine, the twin selector and the CUDA selector's kernel alike, so the three give the
// same bits: mean[t] = sum over h in order of (scores[h][t] / n_heads), in float from 0 (a
// division then an add: nothing a compiler may contract).
#include <cstdint>

#include "core/util/host_device.h"

namespace kvevict {

// scores: head h's row at scores + h * stride (h < n_heads); returns mean[t].
KVEVICT_HOST_DEVICE inline float layer_shared_mean_element(const float* scores, int n_heads, int64_t stride, int64_t t) {
  float mean = 0.0f;
  for (int h = 0; h < n_heads; ++h) mean += scores[static_cast<int64_t>(h) * stride + t] / static_cast<float>(n_heads);
  return mean;
}

}  // namespace kvevict
