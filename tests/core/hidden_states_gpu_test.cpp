// The block's attention inputs handed to device scoring (core/decode/hidden_states_signal.h;
// cuda::HiddenStatesBuffer): the tiled transposing kernel against the twin's element body, bit
// for bit (a copy), over blocks that are and are not multiples of its 32 x 32 tiles, one token (a
// decode step) and a prompt-sized block, the buffer reused from a larger block to a smaller one.
// GPU only: skipped with the reason without one. The CPU side: HiddenStatesSignal.* and
// InsertionScoring.KvzapReadsEachCallsHiddenStatesWhereTheDecoderMadeThem.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/decode/device_download.h"
#include "core/decode/hidden_states_signal.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/hidden_states_buffer.h"
#endif

namespace kvevict {
namespace {

TEST(HiddenStatesGpu, TheTransposeMatchesTheTwinBitForBit) {
  SKIP_WITHOUT_GPU();
#if defined(KVEVICT_HAVE_CUDA)
  cuda::HiddenStatesBuffer buffer;
  for (const auto& [n, dim] : std::vector<std::pair<int, int>>{{2048, 576}, {1, 576}, {37, 64}, {70, 33}, {32, 32}}) {
    std::vector<float> rows(static_cast<size_t>(n) * dim);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>((i * 2654435761u) % 100003) * 1e-3f - 50.0f;
    cuda::DeviceArray<float> device_rows(rows.size());
    device_rows.upload(rows.data(), rows.size());
    std::vector<float> twin;
    const HiddenStatesSignal t = hidden_states_twin(rows.data(), n, dim, twin);
    const HiddenStatesSignal d = buffer.fill(device_rows.data(), n, dim);
    ASSERT_TRUE(d.on_device);
    ASSERT_EQ(d.dim, t.dim);
    ASSERT_EQ(d.n_tokens, t.n_tokens);
    std::vector<float> got;
    download_device_floats(d.data, twin.size(), got, "test hidden states");
    ASSERT_EQ(got.size(), twin.size());
    EXPECT_EQ(std::memcmp(got.data(), twin.data(), twin.size() * sizeof(float)), 0) << n << " x " << dim;
  }
  EXPECT_TRUE(buffer.fill(nullptr, 0, 64).empty());
#endif
}

}  // namespace
}  // namespace kvevict
