// The semantic-check scheme without a GPU: kernel text (the very text NVRTC compiles) is built by
// the system C++ compiler through the prelude's host branch, opened with dlopen and compared with
// a plain C++ reference on random inputs. Proven here on the hand-written CAKE indicator; the
// generated kernels of every policy go through the same harness against the interpreter.
#include <gtest/gtest.h>

#include <cmath>

#include "core/util/error.h"
#include "jit/host_module.h"
#include "jit/kernel_abi.h"
#include "jit/reference_kernels.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

using HostScoreEntry = void (*)(const KvScoreArgs*, float*);

TEST(HostSemantics, HandWrittenIndicatorMatchesItsReferenceOnRandomInputs) {
  testing::TempDir dir;
  HostModule module(cake_indicator_source(200.0f, 5), dir.path(), "cake");
  auto entry = reinterpret_cast<HostScoreEntry>(module.symbol(kCakeIndicatorEntry));
  struct Shape {
    int group, W, T;
  };
  const Shape shapes[] = {{1, 1, 1}, {1, 2, 3}, {4, 8, 5}, {4, 32, 257}, {2, 16, 1000}, {8, 4, 64}};
  uint32_t seed = 1;
  for (const Shape& shape : shapes) {
    testing::RandomScoreInputs random(shape.group, shape.W, shape.T, seed++);
    std::vector<float> expected(shape.T), actual(shape.T, -1.0f);
    cake_indicator_reference(random.inputs, 200.0f, 5, expected.data());
    const KvScoreArgs args = to_kernel_args(random.inputs);
    entry(&args, actual.data());
    float max_error = 0;
    for (int t = 0; t < shape.T; ++t) {
      ASSERT_TRUE(std::isfinite(actual[t])) << "t=" << t;
      max_error = std::max(max_error, std::fabs(actual[t] - expected[t]) / std::max(1e-6f, std::fabs(expected[t])));
    }
    // Same operations in the same order with contraction off on both sides: rounding should agree.
    EXPECT_LE(max_error, 1e-6f) << "group=" << shape.group << " W=" << shape.W << " T=" << shape.T;
  }
}

TEST(HostSemantics, HarnessCatchesAWrongKernel) {
  // The harness must be able to fail: a kernel with a different pooling width disagrees.
  testing::TempDir dir;
  HostModule module(cake_indicator_source(200.0f, 3), dir.path(), "cake3");
  auto entry = reinterpret_cast<HostScoreEntry>(module.symbol(kCakeIndicatorEntry));
  testing::RandomScoreInputs random(4, 8, 100, 42);
  std::vector<float> expected(100), actual(100);
  cake_indicator_reference(random.inputs, 200.0f, 5, expected.data());
  const KvScoreArgs args = to_kernel_args(random.inputs);
  entry(&args, actual.data());
  float max_error = 0;
  for (int t = 0; t < 100; ++t) max_error = std::max(max_error, std::fabs(actual[t] - expected[t]));
  EXPECT_GT(max_error, 1e-4f);
}

TEST(HostSemantics, HostCompileErrorsAreReportedWithTheCompilerOutput) {
  testing::TempDir dir;
  try {
    HostModule module(kernel_prelude() + "int broken( {", dir.path(), "broken");
    FAIL() << "expected a compile error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("host compilation failed"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict::jit
