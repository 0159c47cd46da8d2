#pragma once
// Shared by the CUDA decoder's GPU tests: the skip rule (gpu_test_skip.h), the small GQA model
// geometry they run on, and the logit tolerance of the CUDA decoder against the CPU decoder (its
// derivation: cuda_decoder_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/model/model_config.h"
#include "gpu_test_skip.h"

namespace kvevict::test {

// 3 layers, 6 query heads over 2 KV heads (group 3), head_dim 16, vocabulary 300, context 512.
inline ModelConfig gqa_test_config(const std::string& name) {
  ModelConfig c;
  c.name = name;
  c.n_layers = 3, c.dim = 96, c.n_heads = 6, c.n_kv_heads = 2, c.head_dim = 16, c.hidden_dim = 160;
  c.vocab_size = 300, c.context_length = 512;
  return c;
}

// max |logit_cuda - logit_cpu| allowed: 0.02 * (1 + max |logit_cpu|).
inline float logit_bound(const std::vector<float>& cpu) {
  float scale = 0;
  for (float v : cpu) scale = std::max(scale, std::abs(v));
  return 0.02f * (1.0f + scale);
}

inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

}  // namespace kvevict::test
