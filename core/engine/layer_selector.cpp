// The engine's layer selectors; see layer_selector.h.
#include "core/engine/layer_selector.h"

#include <algorithm>
#include <string>

#include "core/engine/codebook.h"
#include "core/engine/codebook_graph.h"
#include "core/engine/device_selection_twin.h"
#include "core/engine/layer_score_buffers.h"
#include "core/engine/layer_shared_mean.h"
#include "core/engine/score_buffer_keep.h"
#include "core/util/error.h"

#ifdef KVEVICT_HAVE_CUDA
#include "core/engine/cuda/cuda_layer_selector.h"
#endif

namespace kvevict {
namespace {

class HostLayerSelector final : public LayerSelector {
 public:
  SelectionDevice device() const override { return SelectionDevice::Host; }
  std::vector<std::vector<int>> select_heads(const std::vector<std::span<const float>>& scores,
                                             const std::vector<std::span<const int32_t>>& positions,
                                             const std::vector<HeadSelectionSpec>& specs) override {
    std::vector<std::vector<int>> kept(scores.size());
    for (size_t h = 0; h < scores.size(); ++h) kept[h] = select_head(scores[h], positions[h], specs[h]);
    return kept;
  }
  std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                      const std::vector<std::span<const int32_t>>& positions,
                                                      const std::vector<int>& budget, int protect_first,
                                                      int protect_recent, double floor_alpha, bool score_order) override {
    return kvevict::select_layer_adaptive(scores, positions, budget, protect_first, protect_recent, floor_alpha,
                                          score_order);
  }
};

// The device's similarity graph on the CPU: codebook_graph_word per (row, word), as the kernel's
// threads run it (core/engine/cuda/codebook_graph.cu).
class TwinSimilarityGraph final : public SimilarityGraphBuilder {
 public:
  std::vector<uint64_t> build(const float* unit, int n, int dim, double theta) const override {
    const size_t words = codebook_graph_words(n);
    std::vector<uint64_t> graph(static_cast<size_t>(n) * words);
    for (int a = 0; a < n; ++a)
      for (size_t w = 0; w < words; ++w)
        graph[static_cast<size_t>(a) * words + w] = codebook_graph_word(unit, n, dim, theta, a, static_cast<int64_t>(w));
    return graph;
  }
};

class TwinLayerSelector final : public LayerSelector {
 public:
  const SimilarityGraphBuilder* similarity_graph() const override { return &graph_; }
  SelectionDevice device() const override { return SelectionDevice::Twin; }
  std::vector<std::vector<int>> select_heads(const std::vector<std::span<const float>>& scores,
                                             const std::vector<std::span<const int32_t>>& positions,
                                             const std::vector<HeadSelectionSpec>& specs) override {
    const PackedSelectionLayer packed = pack_selection_layer(scores, positions);
    return twin_select_heads(packed.input, device_head_params(specs));
  }
  std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                      const std::vector<std::span<const int32_t>>& positions,
                                                      const std::vector<int>& budget, int protect_first,
                                                      int protect_recent, double floor_alpha, bool score_order) override {
    const PackedSelectionLayer packed = pack_selection_layer(scores, positions);
    return twin_select_layer_adaptive(packed.input, budget, protect_first, protect_recent, floor_alpha, score_order);
  }
  float* layer_score_buffer(int layer, std::span<const int64_t> lengths) override {
    Buffers::Buffer& b = buffers_.lay(layer, lengths);
    b.scores.assign(static_cast<size_t>(std::max<int64_t>(1, layer_score_offset(lengths, lengths.size()))), 0.0f);
    return b.scores.data();
  }
  std::vector<std::vector<int>> select_heads_from_buffer(int layer, const std::vector<std::span<const int32_t>>& positions,
                                                         const std::vector<HeadSelectionSpec>& specs,
                                                         const CachedPositionsSignal* held) override {
    return twin_select_heads(buffered_input(layer, positions, held), device_head_params(specs));
  }
  std::vector<std::vector<int>> select_layer_adaptive_from_buffer(int layer,
                                                                  const std::vector<std::span<const int32_t>>& positions,
                                                                  const std::vector<int>& budget, int protect_first,
                                                                  int protect_recent, double floor_alpha,
                                                                  bool score_order,
                                                                  const CachedPositionsSignal* held) override {
    return twin_select_layer_adaptive(buffered_input(layer, positions, held), budget, protect_first, protect_recent,
                                      floor_alpha, score_order);
  }
  std::vector<int> select_layer_shared_from_buffer(int layer, int n_heads, std::span<const int32_t> positions,
                                                   const HeadSelectionSpec& spec,
                                                   const CachedPositionsSignal* held) override {
    const int64_t T = static_cast<int64_t>(positions.size());
    if (n_heads < 1) throw std::logic_error("layer selector: a layer-shared selection over no head");
    const Buffers::Buffer& b = buffers_.laid(layer);
    check_score_buffer_lengths(b.lengths, std::vector<int64_t>(static_cast<size_t>(n_heads), T));
    mean_.resize(static_cast<size_t>(std::max<int64_t>(1, T)));
    for (int64_t t = 0; t < T; ++t) mean_[t] = layer_shared_mean_element(b.scores.data(), n_heads, T, t);
    const int64_t one[] = {T};
    const devsel::SelLayerInput in = held ? held_selection_input(mean_.data(), one, cached_positions_of_head(*held, 0))
                                          : buffered_selection_input(mean_.data(), {positions}, positions_);
    return std::move(twin_select_heads(in, {device_head_params(spec)}).front());
  }
  // score_keep_element for every head's entries in order, as the kernel's threads run it.
  void keep_in_buffer(int layer, const std::vector<std::vector<int>>& kept) override {
    Buffers::Buffer& b = buffers_.laid(layer);
    const ScoreKeepPlan plan = plan_score_keep(b.lengths, kept);
    std::vector<float> next(static_cast<size_t>(std::max<int64_t>(1, plan.total)), 0.0f);
    for (const ScoreKeepHead& head : plan.heads)
      for (int64_t i = 0; i < head.count; ++i) score_keep_element(b.scores.data(), plan.kept.data(), head, i, next.data());
    b.scores.swap(next);
    b.lengths = plan.lengths;
  }
  std::vector<int64_t> score_buffer_lengths(int layer) const override { return buffers_.lengths(layer); }
  void release_score_buffer(int layer) override { buffers_.release(layer); }
  void release_score_buffers() override { buffers_.release_all(); }

 private:
  using Buffers = LayerScoreBuffers<std::vector<float>>;
  // Layer `layer`'s buffer as a selection's input, its heads exactly as long as `positions`, the
  // positions `held` describes read there (the twin's "device" is host memory) or `positions` packed.
  devsel::SelLayerInput buffered_input(int layer, const std::vector<std::span<const int32_t>>& positions,
                                       const CachedPositionsSignal* held) {
    const Buffers::Buffer& b = buffers_.laid(layer);
    check_score_buffer_lengths(b.lengths, head_lengths_of(positions));
    if (held) return held_selection_input(b.scores.data(), b.lengths, *held);
    return buffered_selection_input(b.scores.data(), positions, positions_);
  }
  Buffers buffers_;
  std::vector<float> mean_;
  std::vector<int32_t> positions_;
  TwinSimilarityGraph graph_;
};

}  // namespace

std::unique_ptr<LayerSelector> make_layer_selector(SelectionDevice device) {
  switch (device) {
    case SelectionDevice::Host: return std::make_unique<HostLayerSelector>();
    case SelectionDevice::Twin: return std::make_unique<TwinLayerSelector>();
    case SelectionDevice::Cuda:
#ifdef KVEVICT_HAVE_CUDA
      return cuda::make_cuda_layer_selector();
#else
      throw RuntimeError("device selection: this build has no CUDA (configure with the CUDA toolkit)");
#endif
  }
  throw std::logic_error("make_layer_selector: unknown SelectionDevice");
}

}  // namespace kvevict
