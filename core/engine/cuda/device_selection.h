#pragma once
// CUDA launchers of device-side selection for one layer (issue 10; built only with
// KVEVICT_HAVE_CUDA). The kernels run the block stages of core/engine/device_selection_head.h,
// one block of devsel::kSelThreads threads per stored head, on the legacy default stream; the
// contract (exact select_head / select_layer_adaptive results, kept order, distinct positions)
// is device_selection_twin.h's, and the CPU twin there is the reference the GPU test compares with.
// This header needs no CUDA headers. Errors: bad input throws UsageError before any launch; a
// failing launch or CUDA call throws RuntimeError naming the kernel or call.
//
// Status: compiled with nvcc, never run on a GPU during development (none was available); the GPU
// test (tests/core/device_selection_gpu_test.cpp) compares it with the twin and skips without one.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/engine/device_selection_head.h"

namespace kvevict::cuda {

class DeviceSelector {
 public:
  DeviceSelector();
  ~DeviceSelector();
  DeviceSelector(const DeviceSelector&) = delete;
  DeviceSelector& operator=(const DeviceSelector&) = delete;

  // select_head for every head of `in` (device pointers), one HeadParams per head (from
  // device_head_params). Writes out.kept / out.kept_count (device pointers; kept_stride must be
  // >= in.max_length). Asynchronous apart from the small parameter upload.
  void select_heads(const devsel::SelLayerInput& in, const std::vector<devsel::HeadParams>& params,
                    const devsel::SelOutput& out);
  // select_layer_adaptive: protection kernel, joint-ranking kernel, a device -> host copy of the
  // per-head counts (synchronises), the host's floor_alpha blend, then the per-head kernel.
  void select_layer_adaptive(const devsel::SelLayerInput& in, const std::vector<int>& budget, int protect_first,
                             int protect_recent, double floor_alpha, bool score_order,
                             const devsel::SelOutput& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvevict::cuda
