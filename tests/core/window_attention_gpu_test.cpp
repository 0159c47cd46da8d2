// The window attention CUDA kernel (core/decode/cuda/window_attention.h) against its CPU twin on
// device copies of the CPU test's layers (GPU only; skipped with the reason without the CUDA
// toolkit or a usable device). Passed on an H200 on 2026-12-04 (docs/CUDA.md).
//
// Tolerance: the twin runs the same phases in the same order, so only the compilers' FMA
// contraction and the device's expf (2 ulp) differ: a few f32 ulps per logit and per probability,
// held to |got - twin| <= 1e-5 * twin + 1e-7 (over 100 ulps of each probability). Entries the twin
// leaves exactly 0 (masked, padding, blind rows) must be exactly 0 on the device too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/decode/window_attention_twin.h"
#include "core/util/error.h"
#include "gpu_test_skip.h"
#include "window_attention_test_cases.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/window_attention.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

using window_test::Case;

constexpr double kRel = 1e-5, kAbs = 1e-7;

void check_case(const Case& c, uint32_t seed, bool split = false) {
  const window_test::TwinRun run = window_test::run_twin(c, seed);
  const window_test::Problem& P = run.P;
  const WindowAttentionPlan& plan = run.plan;
  if (split) {
    ASSERT_GT(plan.chunks, 1) << name(c) << ": not split along the cache";
  }
  const std::vector<float>& twin = run.out;

  cuda::DeviceArray<uint16_t> keys, values;
  cuda::DeviceArray<int32_t> positions;
  cuda::DeviceArray<float> queries, out(std::max<size_t>(plan.out_floats, 1)),
      partials(std::max<size_t>(plan.partial_floats, 1));
  keys.upload(P.layer.keys);
  values.upload(P.layer.values);
  positions.upload(P.positions);
  queries.upload(P.queries);
  DeviceKvLayerView view = P.layer.view;
  view.keys = keys.data();
  view.values = values.data();
  view.positions = positions.data();
  // NaN in the output and the split's partials first: an element the kernels do not write (or a
  // partial the first kernel does not store) shows up.
  const std::vector<float> poison(std::max(out.size(), partials.size()), NAN);
  out.upload(poison.data(), out.size());
  partials.upload(poison.data(), partials.size());
  cuda::window_attention(view, plan, queries.data(), out.data(), out.size(), partials.data(), partials.size());
  std::vector<float> got(plan.out_floats);
  if (!got.empty()) out.download(got.data(), got.size());
  double worst = 0;
  size_t at = 0;
  for (size_t e = 0; e < twin.size(); ++e) {
    const double ratio = twin[e] == 0.0f ? (got[e] == 0.0f ? 0.0 : INFINITY)
                         : std::isfinite(got[e])
                             ? std::abs(double(got[e]) - twin[e]) / (kRel * twin[e] + kAbs)
                             : INFINITY;
    if (ratio > worst) worst = ratio, at = e;
  }
  EXPECT_LE(worst, 1.0) << name(c) << ": element " << at << " got " << (got.empty() ? 0.0f : got[at]) << " twin "
                        << (twin.empty() ? 0.0f : twin[at]);
}

TEST(WindowAttentionGpu, SweepMatchesTheTwin) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1;
  for (const Case& c : window_test::sweep_cases()) check_case(c, seed++);
}

TEST(WindowAttentionGpu, EveryWindowSizeAndPlace) {
  SKIP_WITHOUT_GPU();
  for (const window_test::SeededCase& s : window_test::place_cases()) check_case(s.c, s.seed);
}

TEST(WindowAttentionGpu, LongHeadsAndAWideRowStride) {
  SKIP_WITHOUT_GPU();
  for (const window_test::SeededCase& s : window_test::long_head_cases()) check_case(s.c, s.seed);
  Case big;  // a realistic layer: 8 KV heads of a 32-head model, W 32, a few thousand entries
  big.type = KvType::F16;
  big.group = 4;
  big.head_dim = 128;
  big.W = 32;
  big.lengths = {4096, 1500, 4000, 9, 2048, 0, 3333, 4095};
  big.ascending = false;
  check_case(big, 42);
}

// Rows split along the cache: the two kernels against the twin's two passes (docs/CUDA.md,
// "The window attention split along the cache"; not yet run on a GPU).
TEST(WindowAttentionGpu, RowsSplitAlongTheCacheMatchTheTwin) {
  SKIP_WITHOUT_GPU();
  for (const window_test::SeededCase& s : window_test::split_cases()) check_case(s.c, s.seed, /*split=*/true);
}

// The launcher's argument checks run before any CUDA call, so they are tested without a device.
TEST(WindowAttentionGpu, LauncherRefusesBadArguments) {
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.head_dim = 64;
  v.length[0] = 100;
  v.length[1] = 50;
  const WindowAttentionPlan plan = plan_window_attention(v, 8, 2);
  EXPECT_THROW(cuda::window_attention(v, plan, nullptr, nullptr, plan.out_floats - 1), UsageError);
  DeviceKvLayerView other = v;
  other.head_dim = 128;
  EXPECT_THROW(cuda::window_attention(other, plan, nullptr, nullptr, plan.out_floats), UsageError);
  DeviceKvLayerView longer = v;
  longer.length[1] = 101;
  EXPECT_THROW(cuda::window_attention(longer, plan, nullptr, nullptr, plan.out_floats), UsageError);
  // A split plan without its partials.
  DeviceKvLayerView long_heads = v;
  long_heads.length[0] = long_heads.length[1] = 5000;
  WindowPlanOptions split;
  split.chunk = 1024;
  const WindowAttentionPlan s = plan_window_attention(long_heads, 8, 2, split);
  ASSERT_GT(s.chunks, 1);
  EXPECT_THROW(cuda::window_attention(long_heads, s, nullptr, nullptr, s.out_floats), UsageError);
  EXPECT_THROW(cuda::window_attention(long_heads, s, nullptr, nullptr, s.out_floats, nullptr, s.partial_floats),
               UsageError);
}

// The scratch the decoder grows step by step (DeviceArray::grow): a quarter's room, reused while it
// lasts; a request the device cannot hold leaves the array empty, the runtime's error cleared.
TEST(DeviceArrayGpu, GrowKeepsAQuartersRoomAndReusesItUntilOutgrown) {
  SKIP_WITHOUT_GPU();
  cuda::DeviceArray<float> a;
  a.grow(1000);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a.capacity(), 1250u);
  float* const first = a.data();
  ASSERT_NE(first, nullptr);
  a.grow(1250);  // within the room: the same allocation
  EXPECT_EQ(a.data(), first);
  EXPECT_EQ(a.size(), 1250u);
  a.grow(10);  // never shrinks
  EXPECT_EQ(a.data(), first);
  EXPECT_EQ(a.capacity(), 1250u);
  a.grow(1250);
  std::vector<float> in(1250), out(1250);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i) * 0.5f;
  a.upload(in.data(), in.size());
  a.download(out.data(), out.size());
  EXPECT_EQ(in, out);
  a.grow(1251);
  EXPECT_EQ(a.capacity(), 1251u + 1251u / 4);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_THROW(a.grow(2 * (total / sizeof(float))), RuntimeError);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.capacity(), 0u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failed allocation's error was left pending";
  a.grow(16);
  ASSERT_NE(a.data(), nullptr);
  a.upload(in.data(), 16);
  a.download(out.data(), 16);
  EXPECT_TRUE(std::equal(in.begin(), in.begin() + 16, out.begin()));
}

// The window attention buffer's answer before a call (the decoder declines the window attention,
// and the rows come to the host, rather than fail mid-call): a small output fits, one as large as
// the device does not.
TEST(WindowAttentionGpu, BufferAnswersFromTheDevicesFreeMemory) {
  SKIP_WITHOUT_GPU();
  cuda::WindowAttentionBuffer buffer;
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_TRUE(buffer.can_hold(1 << 20));
  EXPECT_FALSE(buffer.can_hold(total / sizeof(float)));
  EXPECT_FALSE(buffer.can_hold(free / sizeof(float)));  // more than half the free memory
}

#else

TEST(WindowAttentionGpu, SweepMatchesTheTwin) { SKIP_WITHOUT_GPU(); }

#endif

}  // namespace
}  // namespace kvevict
