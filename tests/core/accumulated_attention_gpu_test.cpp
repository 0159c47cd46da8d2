// The accumulated attention store on a CUDA device (core/engine/cuda/accumulated_rebuild.h)
// against the host engine's rule on the CPU test's random scripts (accumulated_attention_cases.h),
// with the decoder-style column sums in device memory: bit for bit (one float add per element,
// no contraction possible). GPU only: skipped with the reason without CUDA or a usable device.
#include <gtest/gtest.h>

#include <vector>

#include "accumulated_attention_cases.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#endif

namespace kvevict {
namespace {

TEST(AccumulatedAttentionGpu, CudaStoreMatchesTheHostRuleBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  cuda::DeviceArray<float> held;
  const test::DeviceSums on_device = [&](const std::vector<float>& packed, int rows, int64_t stride) {
    held.upload(packed);
    return ColumnSumsSignal{held.data(), rows, stride};
  };
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    auto store = make_accumulated_attention_store(SelectionDevice::Cuda);
    ASSERT_EQ(store->device(), SelectionDevice::Cuda);
    test::run_accumulated_script(*store, seed, 120, on_device);
  }
#endif
}

}  // namespace
}  // namespace kvevict
