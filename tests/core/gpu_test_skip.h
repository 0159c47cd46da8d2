#pragma once
// The skip rule of every GPU test: a test that needs a CUDA device calls SKIP_WITHOUT_GPU() first
// and is skipped, with the reason (jit::cuda_unavailable_reason), when the build has no CUDA
// toolkit or no usable device.
#include <gtest/gtest.h>

#include <string>

#include "jit/device.h"

#define SKIP_WITHOUT_GPU()                                                                                \
  do {                                                                                                    \
    if (const std::string why = ::kvevict::jit::cuda_unavailable_reason(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)
