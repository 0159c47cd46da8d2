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
// Scores come as host spans (the interpreter's, or downloaded from a scoring kernel), which the
// cuda selector uploads with the positions; or, for a decode eviction by a per-head top-k or
// TOVA's layer-shared rule scored by the CUDA backend, the kernels write them into the selector's
// own buffer (layer_score_buffer) and only the positions go up. The kept lists come down either way (the
// engine's bookkeeping and the device cache's compaction take them from the host).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <span>
#include <vector>

#include "core/engine/policy_modes.h"
#include "core/engine/selection.h"

namespace kvevict {

class SimilarityGraphBuilder;  // codebook.h

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
  // Scores made where the selection runs (PolicyProgram::score_on_device): the buffer, in this
  // selector's memory, for one layer whose heads have `lengths` entries, head h's scores at
  // layer_score_offset(lengths, h) floats from it. Null when the selector runs on the host (the
  // scores then come as spans). Valid until the next call of either method below.
  virtual float* layer_score_buffer(std::span<const int64_t> lengths) {
    (void)lengths;
    return nullptr;
  }
  // select_heads over the scores written into that buffer (for the same heads' lengths, which
  // `positions` give) and `positions` (host memory).
  virtual std::vector<std::vector<int>> select_heads_from_buffer(const std::vector<std::span<const int32_t>>& positions,
                                                                 const std::vector<HeadSelectionSpec>& specs) {
    (void)positions, (void)specs;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // TOVA's layer-shared selection over the scores written into that buffer (n_heads heads, each as
  // long as `positions`, head 0's): select_head on their mean (layer_shared_mean.h) with `spec`;
  // the one kept list, for every head.
  virtual std::vector<int> select_layer_shared_from_buffer(int n_heads, std::span<const int32_t> positions,
                                                           const HeadSelectionSpec& spec) {
    (void)n_heads, (void)positions, (void)spec;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // Who builds SpindleKV's similarity graphs where this selector runs (codebook.h): null on the host
  // (build_codebook's own), the element body in order for the twin, a kernel on a CUDA device. The
  // same bits each way (codebook_graph.h). Owned by the selector.
  virtual const SimilarityGraphBuilder* similarity_graph() const { return nullptr; }
};

// Head h's offset in a layer score buffer: the heads packed one after another (h = the head
// count: the floats the buffer holds).
inline int64_t layer_score_offset(std::span<const int64_t> lengths, size_t h) {
  int64_t offset = 0;
  for (size_t i = 0; i < h; ++i) offset += lengths[i];
  return offset;
}

// std::logic_error unless a score buffer of `held` floats holds the `needed` a selection reads from
// it (a caller whose heads outgrew the buffer it asked for would read past its end).
inline void check_score_buffer_holds(size_t held, int64_t needed) {
  if (needed < 0 || static_cast<size_t>(needed) > held)
    throw std::logic_error("layer selector: heads of " + std::to_string(needed) + " scores in a buffer of " +
                           std::to_string(held));
}

// The selector for `device`. cuda in a build without the CUDA toolkit throws RuntimeError (the
// scoring backend refuses a CUDA device before that in such a build).
std::unique_ptr<LayerSelector> make_layer_selector(SelectionDevice device);

}  // namespace kvevict
