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
// cuda selector uploads with the positions; or, for a per-head top-k, Ada-KV's layer-wide ranking or
// TOVA's layer-shared rule scored by the CUDA backend (a prompt's eviction, cascading or not, and a decode eviction), the
// kernels write them into the selector's own per-layer buffers (layer_score_buffer) and only the
// positions go up, or none where the decoder's device cache holds them (`held`). The kept lists
// come down either way (the engine's bookkeeping and the device cache's compaction take them from
// the host).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <span>
#include <vector>

#include "core/decode/cached_positions_signal.h"
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
  // Scores made where the selection runs (PolicyProgram::score_on_device): layer `layer`'s buffer,
  // in this selector's memory, laid for heads of `lengths` entries, head h's scores at
  // layer_score_offset(lengths, h) floats from it. Null when the selector runs on the host (the
  // scores then come as spans). Each layer has its own buffer, which holds its scores until the
  // layer's next call here, keep_in_buffer or its release: a prompt's scores wait there
  // for a later (cascading) selection, a decode eviction's are selected at once.
  virtual float* layer_score_buffer(int layer, std::span<const int64_t> lengths) {
    (void)layer, (void)lengths;
    return nullptr;
  }
  // select_heads over the scores in layer `layer`'s buffer and `positions` (host memory), which
  // must be exactly as long as the heads it was laid for (std::logic_error otherwise). `held`, when
  // not null: the same positions in this selector's memory (the decoder's device cache's,
  // LayerSignals::cached_positions), read there instead of uploading `positions`
  // (held_selection_input; std::logic_error unless it describes exactly those heads).
  virtual std::vector<std::vector<int>> select_heads_from_buffer(int layer,
                                                                 const std::vector<std::span<const int32_t>>& positions,
                                                                 const std::vector<HeadSelectionSpec>& specs,
                                                                 const CachedPositionsSignal* held = nullptr) {
    (void)layer, (void)positions, (void)specs, (void)held;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // select_layer_adaptive (Ada-KV's joint ranking over the layer's heads) over the scores in layer
  // `layer`'s buffer, with the same checks and the same `held`.
  virtual std::vector<std::vector<int>> select_layer_adaptive_from_buffer(
      int layer, const std::vector<std::span<const int32_t>>& positions, const std::vector<int>& budget,
      int protect_first, int protect_recent, double floor_alpha, bool score_order,
      const CachedPositionsSignal* held = nullptr) {
    (void)layer, (void)positions, (void)budget, (void)protect_first, (void)protect_recent, (void)floor_alpha,
        (void)score_order, (void)held;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // TOVA's layer-shared selection over layer `layer`'s buffer (n_heads heads, each as long as
  // `positions`, head 0's): select_head on their mean (layer_shared_mean.h) with `spec`; the one
  // kept list, for every head. `held`: as above, every head's (head 0's are read).
  virtual std::vector<int> select_layer_shared_from_buffer(int layer, int n_heads, std::span<const int32_t> positions,
                                                           const HeadSelectionSpec& spec,
                                                           const CachedPositionsSignal* held = nullptr) {
    (void)layer, (void)n_heads, (void)positions, (void)spec, (void)held;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // Each head h of layer `layer`'s buffer reduced to its entries kept[h], in that order (what
  // KVCache::keep does to the head), so that the buffer stays aligned with the cache for a later
  // selection (score_buffer_keep.h). std::logic_error for another head count or an index outside
  // the head.
  virtual void keep_in_buffer(int layer, const std::vector<std::vector<int>>& kept) {
    (void)layer, (void)kept;
    throw std::logic_error("layer selector: no score buffer on the host");
  }
  // The head lengths layer `layer`'s buffer is laid for; empty when it holds none.
  virtual std::vector<int64_t> score_buffer_lengths(int layer) const {
    (void)layer;
    return {};
  }
  // Layer `layer`'s buffer given back (its prompt scores selected for the last time), or every
  // layer's (the end of a prompt).
  virtual void release_score_buffer(int layer) { (void)layer; }
  virtual void release_score_buffers() {}
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

// std::logic_error unless a selection reads heads of exactly the lengths a score buffer was laid
// for (`laid`): heads that outgrew it would read past its end, heads that shrank would read another
// head's scores.
inline void check_score_buffer_lengths(std::span<const int64_t> laid, std::span<const int64_t> reading) {
  if (laid.size() == reading.size() && std::equal(laid.begin(), laid.end(), reading.begin())) return;
  auto text = [](std::span<const int64_t> v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? " " : "") + std::to_string(v[i]);
    return out + "]";
  };
  throw std::logic_error("layer selector: heads of " + text(reading) + " entries read from a score buffer laid for " +
                         text(laid));
}

// The lengths of heads given by their positions (what check_score_buffer_lengths compares).
inline std::vector<int64_t> head_lengths_of(const std::vector<std::span<const int32_t>>& positions) {
  std::vector<int64_t> lengths;
  for (const auto& p : positions) lengths.push_back(static_cast<int64_t>(p.size()));
  return lengths;
}

// The selector for `device`. cuda in a build without the CUDA toolkit throws RuntimeError (the
// scoring backend refuses a CUDA device before that in such a build).
std::unique_ptr<LayerSelector> make_layer_selector(SelectionDevice device);

}  // namespace kvevict
