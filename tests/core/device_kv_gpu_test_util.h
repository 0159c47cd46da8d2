#pragma once
// Shared by the GPU tests. The skip rule: a test that needs a CUDA device calls SKIP_WITHOUT_GPU()
// first and is skipped with the reason when the build has no CUDA or no usable device. The logit
// tolerance of the CUDA decoder against the CPU decoder (its derivation: cuda_decoder_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "jit/cuda_driver.h"

namespace kvevict::test {

inline std::string gpu_missing_reason() {
#if !defined(KVEVICT_HAVE_CUDA)
  return "this kvevict was built without the CUDA toolkit";
#else
  const jit::CudaProbe probe = jit::CudaDriver::probe();
  return probe.usable ? "" : "no usable CUDA device: " + probe.reason;
#endif
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

#define SKIP_WITHOUT_GPU()                                                                     \
  do {                                                                                         \
    if (const std::string why = ::kvevict::test::gpu_missing_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
