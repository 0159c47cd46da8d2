#pragma once
// The skip rule of every GPU test: a test that needs a CUDA device calls SKIP_WITHOUT_GPU() first
// and is skipped, with the reason, when the build has no CUDA toolkit or no usable device.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace kvevict::test

#define SKIP_WITHOUT_GPU()                                                                                \
  do {                                                                                                    \
    if (const std::string why = ::kvevict::test::gpu_missing_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
