// The OpenBLAS kernel choice (core/decode/blas_kernels.h): which core type replaces the library's
// generic fallback, and that a program started with the variable set keeps the user's choice.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cstdlib>
#include <string>

#include "core/decode/blas_kernels.h"

namespace kvevict {
namespace {

TEST(BlasKernels, OnlyTheGenericFallbackIsReplaced) {
  EXPECT_STREQ(blas_core_type_override("Prescott", true, true), "SkylakeX");
  EXPECT_STREQ(blas_core_type_override("PRESCOTT", false, true), "Haswell");
  EXPECT_EQ(blas_core_type_override("Prescott", false, false), nullptr);  // nothing better to choose
  EXPECT_EQ(blas_core_type_override("SkylakeX", true, true), nullptr);    // the library knew the CPU
  EXPECT_EQ(blas_core_type_override("Haswell", true, true), nullptr);
  EXPECT_EQ(blas_core_type_override(nullptr, true, true), nullptr);
}

TEST(BlasKernels, ASetVariableIsNeverOverridden) {
  // The test binary's OpenBLAS already loaded: with OPENBLAS_CORETYPE set the call must return
  // without restarting (a restart would rerun this test binary from the start).
  const char* before = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = before ? before : "";
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  use_matching_blas_kernels();
  EXPECT_STREQ(std::getenv("OPENBLAS_CORETYPE"), "Haswell");
  if (before) setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else unsetenv("OPENBLAS_CORETYPE");
  EXPECT_NE(openblas_get_corename(), nullptr);
}

}  // namespace
}  // namespace kvevict
