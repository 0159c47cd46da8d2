// The ragged attention CUDA kernels (core/decode/cuda/ragged_attention.h) against their CPU twin
// and the double reference, on the CPU test's kinds of layers (GPU only; skipped with the reason
// without the CUDA toolkit or a usable device). Passed on an H200 on 2026-12-04 (docs/CUDA.md).
//
// Tolerances: against the twin, which runs the same phases in the same order, only the compilers'
// FMA contraction and the device's expf (2 ulp) differ: a few f32 ulps per score and per weight,
// so 2e-5 * (1 + |x|) (>100 ulps of an O(1) output). Against the reference, the CPU test's 2e-4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/decode/ragged_attention_twin.h"
#include "core/util/error.h"
#include "gpu_test_skip.h"
#include "ragged_attention_test_layer.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/ragged_attention.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

constexpr double kTwinTol = 2e-5, kReferenceTol = 2e-4;

double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    if (got[e] == want[e]) continue;  // also an empty row's -inf max
    const double err = std::abs(double(got[e]) - want[e]) / (1.0 + std::abs(want[e]));
    worst = std::max(worst, std::isfinite(got[e]) ? err : INFINITY);
  }
  return worst;
}

std::vector<float> download(const cuda::DeviceArray<float>& a) {
  std::vector<float> host(a.size());
  if (!host.empty()) a.download(host.data(), host.size());
  return host;
}

struct Case {
  KvType type;
  int group, head_dim, n;
  std::vector<int64_t> lengths;
  int64_t chunk = 0;  // forced chunk (0: the planner's; kOneChunk: no split)
};
constexpr int64_t kOneChunk = int64_t(1) << 40;

void check_case(const Case& c, uint32_t seed) {
  const std::string where = std::string(kv_type_name(c.type)) + " group " + std::to_string(c.group) + " head_dim " +
                            std::to_string(c.head_dim) + " n " + std::to_string(c.n) + " chunk " +
                            std::to_string(c.chunk);
  const ragged_test::Layer L = ragged_test::random_layer(c.type, c.head_dim, c.lengths, seed);
  const int n_heads = L.view.n_heads * c.group;
  const auto q = ragged_test::random_queries(c.n, n_heads, c.head_dim, 1.5f, seed + 1);
  RaggedPlanOptions o;
  o.chunk = c.chunk;
  const RaggedAttentionPlan plan = plan_ragged_attention(L.view, c.n, c.group, o);
  const RaggedAttentionOutput twin = ragged_attention_twin(L.view, plan, q.data());

  cuda::DeviceArray<uint16_t> keys, values;
  keys.upload(L.keys);
  values.upload(L.values);
  cuda::DeviceArray<float> dq, out(q.size()), row_max(twin.row_max.size()), row_sum(twin.row_sum.size()),
      workspace(std::max<size_t>(plan.workspace_floats, 1));
  dq.upload(q);
  DeviceKvLayerView view = L.view;
  view.keys = keys.data();
  view.values = values.data();
  cuda::ragged_attention(view, plan, dq.data(), out.data(), row_max.data(), row_sum.data(), workspace.data(),
                         workspace.size());
  EXPECT_LE(worst_error(download(out), twin.out), kTwinTol) << where << ": output vs twin";
  EXPECT_LE(worst_error(download(row_max), twin.row_max), kTwinTol) << where << ": row max vs twin";
  EXPECT_LE(worst_error(download(row_sum), twin.row_sum), kTwinTol) << where << ": row sum vs twin";
  const ragged_test::Reference ref = ragged_test::reference(L, q, c.n, c.group);
  EXPECT_LE(worst_error(download(out), std::vector<float>(ref.out.begin(), ref.out.end())), kReferenceTol)
      << where << ": output vs reference";

  const int max_len = int(*std::max_element(c.lengths.begin(), c.lengths.end())) + 3;
  const RaggedColumnPlan cp = plan_ragged_column_sums(L.view, c.n, c.group, max_len);
  const std::vector<float> twin_cols =
      ragged_column_sums_twin(L.view, cp, q.data(), twin.row_max.data(), twin.row_sum.data());
  cuda::DeviceArray<float> cols(size_t(n_heads) * max_len);
  cuda::ragged_column_sums(view, cp, dq.data(), row_max.data(), row_sum.data(), cols.data());
  EXPECT_LE(worst_error(download(cols), twin_cols), kTwinTol) << where << ": column sums vs twin";
}

TEST(RaggedAttentionGpu, DecodeMatchesTheTwin) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 1;
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int group : {1, 2, 4})
      for (int hd : {64, 128, 33}) {
        check_case({type, group, hd, 1, {0, 1, 300, 4100}}, seed++);
        check_case({type, group, hd, 1, {0, 1, 300, 4100}, 128}, seed++);
        check_case({type, group, hd, 1, {0, 1, 300, 4100}, kOneChunk}, seed++);
      }
}

TEST(RaggedAttentionGpu, BlocksMatchTheTwin) {
  SKIP_WITHOUT_GPU();
  uint32_t seed = 100;
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int group : {1, 2, 4}) {
      check_case({type, group, 64, 37, {37, 5, 700, 1500}}, seed++);
      check_case({type, group, 128, 3, {3, 1000, 2, 64}}, seed++);
      check_case({type, group, 33, 19, {19, 650, 200, 0}, 192}, seed++);
      check_case({type, group, 64, 37, {37, 5, 700, 1500}, kOneChunk}, seed++);
    }
  check_case({KvType::F16, 4, 256, 9, {9, 300, 1031}}, seed++);
  check_case({KvType::F16, 8, 96, 70, {900, 70}}, seed++);
  check_case({KvType::F16, 4, 128, 1, {6000, 3, 0, 64, 65, 2500, 127, 1}}, seed++);
}

// A long prefill block (several row tiles per head, one chunk) and a long decode (many chunks).
TEST(RaggedAttentionGpu, LongHeads) {
  SKIP_WITHOUT_GPU();
  check_case({KvType::F16, 4, 128, 300, {2000, 300, 1200}}, 7);
  check_case({KvType::BF16, 4, 128, 1, {30000, 12000}}, 8);
}

// The launchers' argument checks run before any CUDA call, so they are tested without a device.
TEST(RaggedAttentionGpu, LaunchersRefuseBadArguments) {
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.head_dim = 64;
  v.length[0] = v.length[1] = 5000;
  RaggedPlanOptions o;
  o.chunk = 64;
  const RaggedAttentionPlan plan = plan_ragged_attention(v, 1, 1, o);
  ASSERT_TRUE(plan.split());
  EXPECT_THROW(cuda::ragged_attention(v, plan, nullptr, nullptr, nullptr, nullptr, nullptr, 0), UsageError);
  DeviceKvLayerView other = v;
  other.head_dim = 128;
  EXPECT_THROW(cuda::ragged_attention(other, plan, nullptr, nullptr, nullptr, nullptr, nullptr, 0), UsageError);
  DeviceKvLayerView longer = v;
  longer.length[1] = 5100;
  float dummy = 0;  // a workspace "of the right size": only the lengths are wrong
  EXPECT_THROW(cuda::ragged_attention(longer, plan, nullptr, nullptr, nullptr, nullptr, &dummy, plan.workspace_floats),
               UsageError);
  const RaggedColumnPlan cp = plan_ragged_column_sums(v, 1, 1, 5000);
  EXPECT_THROW(cuda::ragged_column_sums(other, cp, nullptr, nullptr, nullptr, nullptr), UsageError);
  EXPECT_THROW(cuda::ragged_column_sums(longer, cp, nullptr, nullptr, nullptr, nullptr), UsageError);
}

#else

TEST(RaggedAttentionGpu, DecodeMatchesTheTwin) { SKIP_WITHOUT_GPU(); }

#endif

}  // namespace
}  // namespace kvevict
