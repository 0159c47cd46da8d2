// Device-side selection's CUDA kernels (core/engine/cuda/device_selection.h) against the CPU twin
// (device_selection_twin.h, itself tested against the CPU engine) on the cases of the CPU test:
// identical kept lists. GPU only: skipped with the reason without CUDA or a usable device. Passed on
// an H200 on 2026-12-04 (docs/CUDA.md).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/engine/device_selection_twin.h"
#include "device_selection_cases.h"
#include "gpu_test_skip.h"
#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/device_memory.h"
#include "core/engine/cuda/device_selection.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)

// The packed layer on the device, with an output buffer.
struct DeviceLayer {
  cuda::DeviceArray<float> scores;
  cuda::DeviceArray<int32_t> positions, kept, kept_count;
  devsel::SelLayerInput input;
  devsel::SelOutput out;

  explicit DeviceLayer(const PackedSelectionLayer& packed) {
    scores.upload(packed.scores);
    positions.upload(packed.positions);
    input = repoint(packed.input, scores.data(), positions.data());
    const int64_t stride = std::max<int32_t>(1, input.max_length);
    kept.resize(static_cast<size_t>(std::max(1, input.n_heads) * stride));
    kept_count.resize(static_cast<size_t>(std::max(1, input.n_heads)));
    out = {kept.data(), stride, kept_count.data()};
  }
  std::vector<std::vector<int>> lists() const {
    std::vector<int32_t> counts(static_cast<size_t>(input.n_heads));
    kept_count.download(counts.data(), counts.size());
    std::vector<std::vector<int>> r;
    for (int h = 0; h < input.n_heads; ++h) {
      std::vector<int32_t> row(static_cast<size_t>(counts[static_cast<size_t>(h)]));
      if (!row.empty()) kept.download(row.data(), row.size(), static_cast<size_t>(h * out.kept_stride));
      r.emplace_back(row.begin(), row.end());
    }
    return r;
  }
};

TEST(DeviceSelectionGpu, KernelsEqualTwinOnRandomCases) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(20261204);
  cuda::DeviceSelector selector;
  for (int i = 0; i < 120; ++i) {
    const int n_heads = 1 + static_cast<int>(rng() % 4);
    std::vector<std::vector<float>> s;
    std::vector<std::vector<int32_t>> p;
    std::vector<devsel::HeadParams> params;
    for (int h = 0; h < n_heads; ++h) {
      devsel_test::HeadCase c = devsel_test::random_head(rng, devsel_test::random_length(rng, i), h);
      s.push_back(c.scores);
      p.push_back(c.positions);
      params.push_back(device_head_params(c.spec));
    }
    const PackedSelectionLayer packed = pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p));
    DeviceLayer dev(packed);
    selector.select_heads(dev.input, params, dev.out);
    ASSERT_EQ(dev.lists(), twin_select_heads(packed.input, params)) << "case " << i;
  }
}

TEST(DeviceSelectionGpu, AdaptiveKernelsEqualTwin) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  cuda::DeviceSelector selector;
  for (int i = 0; i < 60; ++i) {
    const int H = 1 + static_cast<int>(rng() % 8);
    std::vector<std::vector<float>> s;
    std::vector<std::vector<int32_t>> p;
    std::vector<int> budget;
    for (int h = 0; h < H; ++h) {
      const int n = (i % 20 == 19) ? 50000 : static_cast<int>(rng() % 800);
      s.push_back(devsel_test::random_scores(rng, n));
      p.push_back(devsel_test::random_positions(rng, n));
      budget.push_back(static_cast<int>(rng() % (n + 2)));
    }
    const double alpha = (i % 3) * 0.4;
    const bool order = i % 2;
    const PackedSelectionLayer packed = pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p));
    DeviceLayer dev(packed);
    selector.select_layer_adaptive(dev.input, budget, 2, 8, alpha, order, dev.out);
    ASSERT_EQ(dev.lists(), twin_select_layer_adaptive(packed.input, budget, 2, 8, alpha, order)) << "case " << i;
  }
}

#else

TEST(DeviceSelectionGpu, KernelsEqualTwinOnRandomCases) { SKIP_WITHOUT_GPU(); }

#endif

}  // namespace
}  // namespace kvevict
