#pragma once
// Where the eviction engine runs its token selection (issue 10, Deliver 4): one layer at a time,
// every stored head of the layer in one call, so that a device runs the layer's heads as one
// launch. Three implementations with one contract, chosen once per engine (make_layer_selector):
//   host  select_head / select_layer_adaptive (selection.h): the reference.
//   twin  the device algorithm on the CPU (device_selection_twin.h): how the tests prove, without a
//         GPU, that the engine hands the device path the same inputs and applies its lists.
//   cuda  cuda::DeviceSelector (core/engine/cuda/device_selection.h) on the current CUDA device.
// Contract: every implementation returns exactly the host's kept cache indices in the host's kept
// order (the device path's exactness, device_selection_twin.h; its one caveat: NACL's Gumbel keys
// use the device's log, which may differ from glibc's by an ulp).
//
// Today the engine's scores are computed on the host (or downloaded from the scoring kernel), so
// the cuda selector uploads a layer's scores and positions and downloads the kept lists; when the
// scores stay on the device, the upload goes and the kept lists feed the device cache's compaction.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/engine/policy_modes.h"
#include "core/engine/selection.h"

namespace kvevict {

class LayerSelector {
 public:
  virtual ~LayerSelector() = default;
  virtual SelectionDevice device() const = 0;
  // select_head(scores[h], positions[h], specs[h]) for every head h of one layer (same sizes).
  virtual std::vector<std::vector<int>> select_heads(const std::vector<std::span<const float>>& scores,
                                                     const std::vector<std::span<const int32_t>>& positions,
                                                     const std::vector<HeadSelectionSpec>& specs) = 0;
  // select_layer_adaptive (Ada-KV) with the same arguments.
  virtual std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                              const std::vector<std::span<const int32_t>>& positions,
                                                              const std::vector<int>& budget, int protect_first,
                                                              int protect_recent, double floor_alpha,
                                                              bool score_order) = 0;
};

// The selector for `device`. cuda in a build without the CUDA toolkit throws RuntimeError (the
// scoring backend refuses a CUDA device before that in such a build).
std::unique_ptr<LayerSelector> make_layer_selector(SelectionDevice device);

}  // namespace kvevict
