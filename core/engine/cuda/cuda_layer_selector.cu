// The engine's cuda layer selector; see cuda_layer_selector.h.
#include "core/engine/cuda/cuda_layer_selector.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/decode/cuda/device_memory.h"
#include "core/engine/cuda/codebook_graph.h"
#include "core/engine/cuda/device_selection.h"
#include "core/engine/device_selection_twin.h"
#include "core/engine/layer_score_buffers.h"
#include "core/engine/layer_shared_mean.h"
#include "core/engine/score_buffer_keep.h"
#include "core/decode/cuda/launch_status.h"

namespace kvevict::cuda {
namespace {

constexpr int kMeanThreads = 256;
constexpr int kKeepThreads = 256;

// TOVA's layer-shared mean, one thread per entry (layer_shared_mean.h).
__global__ void layer_shared_mean_kernel(const float* scores, int n_heads, int64_t T, float* out) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t < T) out[t] = layer_shared_mean_element(scores, n_heads, T, t);
}

// LayerSelector::keep_in_buffer: head blockIdx.y's kept entries, a thread each (score_buffer_keep.h).
__global__ void score_keep_kernel(const float* from, const int32_t* kept, const ScoreKeepHead* heads, float* to) {
  const ScoreKeepHead head = heads[blockIdx.y];
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < head.count) score_keep_element(from, kept, head, i, to);
}

class CudaLayerSelector final : public LayerSelector {
 public:
  SelectionDevice device() const override { return SelectionDevice::Cuda; }
  const SimilarityGraphBuilder* similarity_graph() const override { return graph_.get(); }

  std::vector<std::vector<int>> select_heads(const std::vector<std::span<const float>>& scores,
                                             const std::vector<std::span<const int32_t>>& positions,
                                             const std::vector<HeadSelectionSpec>& specs) override {
    const devsel::SelLayerInput in = upload(scores, positions);
    selector_.select_heads(in, device_head_params(specs), output(in));
    return download(in);
  }

  std::vector<std::vector<int>> select_layer_adaptive(const std::vector<std::span<const float>>& scores,
                                                      const std::vector<std::span<const int32_t>>& positions,
                                                      const std::vector<int>& budget, int protect_first,
                                                      int protect_recent, double floor_alpha, bool score_order) override {
    const devsel::SelLayerInput in = upload(scores, positions);
    selector_.select_layer_adaptive(in, budget, protect_first, protect_recent, floor_alpha, score_order, output(in));
    return download(in);
  }

  float* layer_score_buffer(int layer, std::span<const int64_t> lengths) override {
    Buffers::Buffer& b = buffers_.lay(layer, lengths);
    try {
      b.scores.grow(static_cast<size_t>(std::max<int64_t>(1, layer_score_offset(lengths, lengths.size()))));
    } catch (...) {
      // A failed cudaMalloc leaves the array empty: the layer must not claim the lengths over it, or
      // a later selection from the buffer would launch on a null pointer.
      buffers_.release(layer);
      throw;
    }
    return b.scores.data();
  }
  // The scores are already on the device (the scoring kernels wrote them, in stream order before
  // the selection's kernels); only the positions go up (none when the decoder's device cache holds
  // them: `held`), and the kept lists come down.
  std::vector<std::vector<int>> select_heads_from_buffer(int layer, const std::vector<std::span<const int32_t>>& positions,
                                                         const std::vector<HeadSelectionSpec>& specs,
                                                         const CachedPositionsSignal* held) override {
    const devsel::SelLayerInput in = buffered_input(layer, positions, held);
    selector_.select_heads(in, device_head_params(specs), output(in));
    return download(in);
  }
  std::vector<std::vector<int>> select_layer_adaptive_from_buffer(int layer,
                                                                  const std::vector<std::span<const int32_t>>& positions,
                                                                  const std::vector<int>& budget, int protect_first,
                                                                  int protect_recent, double floor_alpha,
                                                                  bool score_order,
                                                                  const CachedPositionsSignal* held) override {
    const devsel::SelLayerInput in = buffered_input(layer, positions, held);
    selector_.select_layer_adaptive(in, budget, protect_first, protect_recent, floor_alpha, score_order, output(in));
    return download(in);
  }
  // The mean of the buffer's heads made on the device (one thread per entry), then select_heads
  // over it as one head.
  std::vector<int> select_layer_shared_from_buffer(int layer, int n_heads, std::span<const int32_t> positions,
                                                   const HeadSelectionSpec& spec,
                                                   const CachedPositionsSignal* held) override {
    const int64_t T = static_cast<int64_t>(positions.size());
    if (n_heads < 1) throw std::logic_error("layer selector: a layer-shared selection over no head");
    Buffers::Buffer& b = buffers_.laid(layer);
    check_score_buffer_lengths(b.lengths, std::vector<int64_t>(static_cast<size_t>(n_heads), T));
    mean_.grow(static_cast<size_t>(std::max<int64_t>(1, T)));
    if (T > 0) {
      const unsigned blocks = unsigned((T + kMeanThreads - 1) / kMeanThreads);
      layer_shared_mean_kernel<<<blocks, kMeanThreads>>>(b.scores.data(), n_heads, T, mean_.data());
      check(launch_status(), "layer_shared_mean_kernel");
    }
    devsel::SelLayerInput in;
    if (held) {
      const int64_t one[] = {T};
      in = held_selection_input(mean_.data(), one, cached_positions_of_head(on_device(*held), 0));
    } else {
      in = buffered_selection_input(mean_.data(), {positions}, packed_positions_);
      positions_.upload(packed_positions_);
      in = repoint(in, mean_.data(), positions_.data());
    }
    selector_.select_heads(in, {device_head_params(spec)}, output(in));
    return std::move(download(in).front());
  }
  // The plan and the kept indices go up (one copy each), a thread per kept entry gathers into the
  // scratch, which is copied back on the device: nothing comes down, no synchronisation.
  void keep_in_buffer(int layer, const std::vector<std::vector<int>>& kept) override {
    Buffers::Buffer& b = buffers_.laid(layer);
    const ScoreKeepPlan plan = plan_score_keep(b.lengths, kept);
    if (plan.total > 0) {
      keep_heads_.resize(plan.heads.size());
      keep_heads_.upload(plan.heads.data(), plan.heads.size());
      keep_indices_.upload(plan.kept);
      kept_scores_.grow(static_cast<size_t>(plan.total));
      const dim3 grid(unsigned((plan.longest + kKeepThreads - 1) / kKeepThreads), unsigned(plan.heads.size()));
      score_keep_kernel<<<grid, kKeepThreads>>>(b.scores.data(), keep_indices_.data(), keep_heads_.data(),
                                                kept_scores_.data());
      check(launch_status(), "score_keep_kernel");
      check(cudaMemcpyAsync(b.scores.data(), kept_scores_.data(), static_cast<size_t>(plan.total) * sizeof(float),
                            cudaMemcpyDeviceToDevice),
            "score buffer keep copy");
    }
    b.lengths = plan.lengths;
  }
  std::vector<int64_t> score_buffer_lengths(int layer) const override { return buffers_.lengths(layer); }
  void release_score_buffer(int layer) override { buffers_.release(layer); }
  void release_score_buffers() override { buffers_.release_all(); }

 private:
  // A description of positions in device memory, or std::logic_error (a host address would be
  // dereferenced by a kernel).
  static const CachedPositionsSignal& on_device(const CachedPositionsSignal& held) {
    if (!held.on_device) throw std::logic_error("cuda layer selector: positions held in host memory");
    return held;
  }
  // Layer `layer`'s buffer as a selection's input on the device (its heads exactly as long as
  // `positions`): only the positions go up, or none where the device cache holds them (`held`).
  devsel::SelLayerInput buffered_input(int layer, const std::vector<std::span<const int32_t>>& positions,
                                       const CachedPositionsSignal* held) {
    Buffers::Buffer& b = buffers_.laid(layer);
    check_score_buffer_lengths(b.lengths, head_lengths_of(positions));
    if (held) return held_selection_input(b.scores.data(), b.lengths, on_device(*held));
    const devsel::SelLayerInput in = buffered_selection_input(b.scores.data(), positions, packed_positions_);
    positions_.upload(packed_positions_);
    return repoint(in, b.scores.data(), positions_.data());
  }
  // The layer packed [n_heads][max_length] (pack_selection_layer checks it) and copied to the device.
  devsel::SelLayerInput upload(const std::vector<std::span<const float>>& scores,
                               const std::vector<std::span<const int32_t>>& positions) {
    const PackedSelectionLayer packed = pack_selection_layer(scores, positions);
    scores_.upload(packed.scores);
    positions_.upload(packed.positions);
    return repoint(packed.input, scores_.data(), positions_.data());
  }
  // The kept lists [n_heads][stride] and, after them, the per-head counts, in one allocation, so
  // that one copy (one synchronisation) brings both back.
  devsel::SelOutput output(const devsel::SelLayerInput& in) {
    const int64_t stride = std::max<int64_t>(1, in.max_length);
    const size_t lists = static_cast<size_t>(std::max(1, in.n_heads)) * stride;
    kept_.grow(lists + static_cast<size_t>(std::max(1, in.n_heads)));
    return {kept_.data(), stride, kept_.data() + lists};
  }
  std::vector<std::vector<int>> download(const devsel::SelLayerInput& in) {
    const int64_t stride = std::max<int64_t>(1, in.max_length);
    const size_t lists = static_cast<size_t>(std::max(1, in.n_heads)) * stride;
    std::vector<int32_t> all(lists + static_cast<size_t>(in.n_heads));
    if (in.n_heads > 0) kept_.download(all.data(), all.size());  // synchronises with the kernels
    const int32_t* counts = all.data() + lists;
    std::vector<std::vector<int>> kept(in.n_heads);
    for (int h = 0; h < in.n_heads; ++h) {
      if (counts[h] < 0 || counts[h] > in.length[h])
        throw RuntimeError("device selection: head " + std::to_string(h) + " returned " + std::to_string(counts[h]) +
                           " kept entries of " + std::to_string(in.length[h]));
      const int32_t* row = all.data() + static_cast<size_t>(h) * stride;
      kept[h].assign(row, row + counts[h]);
    }
    return kept;
  }

  using Buffers = LayerScoreBuffers<DeviceArray<float>>;

  DeviceSelector selector_;
  Buffers buffers_;  // the per-layer score buffers (layer_score_buffer)
  DeviceArray<float> scores_, mean_, kept_scores_;
  DeviceArray<ScoreKeepHead> keep_heads_;
  DeviceArray<int32_t> keep_indices_;
  DeviceArray<int32_t> positions_, kept_;  // kept_: the lists, then the counts (output())
  std::vector<int32_t> packed_positions_;
  std::unique_ptr<SimilarityGraphBuilder> graph_ = make_cuda_similarity_graph();
};

}  // namespace

std::unique_ptr<LayerSelector> make_cuda_layer_selector() { return std::make_unique<CudaLayerSelector>(); }

}  // namespace kvevict::cuda
