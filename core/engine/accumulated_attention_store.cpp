// The accumulated attention held on the scoring device; contract in accumulated_attention_store.h.
#include "core/engine/accumulated_attention_store.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "core/util/error.h"

#ifdef KVEVICT_HAVE_CUDA
#include "core/engine/cuda/accumulated_rebuild.h"
#endif

namespace kvevict {

void AccumulatedAttentionStore::reset(int n_layers, int n_heads, int group) {
  if (n_layers < 0 || n_heads < 0 || group < 1)
    throw std::logic_error("accumulated attention: " + std::to_string(n_layers) + " layers, " +
                           std::to_string(n_heads) + " heads, group " + std::to_string(group));
  group_ = group;
  book_.assign(n_layers, std::vector<AccumulatedHeadBook>(n_heads));
  resize_layers(n_layers);
}

void AccumulatedAttentionStore::check_layer(int layer, size_t n_lengths) const {
  if (layer < 0 || static_cast<size_t>(layer) >= book_.size())
    throw std::logic_error("accumulated attention: layer " + std::to_string(layer) + " of " +
                           std::to_string(book_.size()));
  if (n_lengths != book_[layer].size())
    throw std::logic_error("accumulated attention: " + std::to_string(n_lengths) + " lengths for " +
                           std::to_string(book_[layer].size()) + " heads");
}

void AccumulatedAttentionStore::rebuild_layer(int layer, std::span<const int64_t> lengths, const float* sums,
                                              int64_t stride, bool on_host) {
  std::vector<AccumulatedHeadBook>& heads = book_[layer];
  const AccumulatedRebuildPlan plan = plan_accumulated_rebuild(heads, lengths, group_);
  rebuild(layer, plan, group_, sums, stride, on_host);
  for (size_t h = 0; h < heads.size(); ++h) {
    heads[h].held_length = plan.heads[h].new_length;
    heads[h].offset = plan.heads[h].new_offset;
    heads[h].mapped = false;
    heads[h].map.clear();
  }
}

void AccumulatedAttentionStore::add(int layer, std::span<const int64_t> lengths, const ColumnSumsSignal& sums) {
  check_layer(layer, lengths.size());
  if (sums.empty()) throw std::logic_error("accumulated attention: no device column sums to add");
  const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  if (sums.n_heads != static_cast<int>(lengths.size()) * group_ || sums.row_stride < longest)
    throw std::logic_error("accumulated attention: column sums of " + std::to_string(sums.n_heads) + " rows of " +
                           std::to_string(sums.row_stride) + " for " + std::to_string(lengths.size()) +
                           " heads of group " + std::to_string(group_) + " up to " + std::to_string(longest) +
                           " entries");
  rebuild_layer(layer, lengths, sums.data, sums.row_stride, /*on_host=*/false);
}

void AccumulatedAttentionStore::add(int layer, std::span<const int64_t> lengths,
                                    const std::vector<std::vector<float>>& sums) {
  check_layer(layer, lengths.size());
  if (sums.size() != lengths.size() * static_cast<size_t>(group_))
    throw std::logic_error("accumulated attention: column sums of " + std::to_string(sums.size()) + " query heads for " +
                           std::to_string(lengths.size()) + " heads of group " + std::to_string(group_));
  const int64_t stride = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  // Packed as a decoder packs them; a row shorter than its head adds zero past its end, as the
  // host engine adds nothing there.
  host_sums_.assign(sums.size() * static_cast<size_t>(stride), 0.0f);
  for (size_t q = 0; q < sums.size(); ++q) {
    const size_t n = std::min<size_t>(sums[q].size(), static_cast<size_t>(lengths[q / group_]));
    std::copy_n(sums[q].data(), n, host_sums_.data() + q * static_cast<size_t>(stride));
  }
  rebuild_layer(layer, lengths, host_sums_.data(), stride, /*on_host=*/true);
}

void AccumulatedAttentionStore::keep(int layer, int head, std::span<const int> kept, int64_t length) {
  if (layer < 0 || static_cast<size_t>(layer) >= book_.size() || head < 0 ||
      static_cast<size_t>(head) >= book_[layer].size())
    throw std::logic_error("accumulated attention: keep of layer " + std::to_string(layer) + " head " +
                           std::to_string(head));
  compose_accumulated_keep(book_[layer][head], kept, length);
}

bool AccumulatedAttentionStore::current(int layer, std::span<const int64_t> lengths) const {
  const std::vector<AccumulatedHeadBook>& heads = book_[layer];
  for (size_t h = 0; h < heads.size(); ++h)
    if (heads[h].mapped || heads[h].held_length != lengths[h]) return false;
  return true;
}

const float* AccumulatedAttentionStore::head(int layer, std::span<const int64_t> lengths, int head) {
  check_layer(layer, lengths.size());
  if (head < 0 || static_cast<size_t>(head) >= lengths.size())
    throw std::logic_error("accumulated attention: head " + std::to_string(head));
  std::lock_guard<std::mutex> lock(flush_);
  if (!current(layer, lengths)) rebuild_layer(layer, lengths, nullptr, 0, false);
  return data(layer) + book_[layer][head].offset;
}

std::vector<float> AccumulatedAttentionStore::read(int layer, std::span<const int64_t> lengths, int h) {
  head(layer, lengths, h);
  const AccumulatedHeadBook& b = book_[layer][h];
  std::vector<float> out(static_cast<size_t>(b.held_length) * group_);
  if (!out.empty()) download(layer, static_cast<size_t>(b.offset), out.size(), out.data());
  return out;
}

std::vector<int64_t> AccumulatedAttentionStore::lengths(int layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= book_.size())
    throw std::logic_error("accumulated attention: layer " + std::to_string(layer) + " of " +
                           std::to_string(book_.size()));
  std::vector<int64_t> out;
  for (const AccumulatedHeadBook& b : book_[layer])
    out.push_back(b.mapped ? static_cast<int64_t>(b.map.size()) : b.held_length);
  return out;
}

namespace {

// The CPU twin: host buffers, the kernel's element body in a loop.
class TwinAccumulatedAttention final : public AccumulatedAttentionStore {
 public:
  SelectionDevice device() const override { return SelectionDevice::Twin; }

 protected:
  void resize_layers(int n_layers) override { layers_.assign(n_layers, {}); }
  void rebuild(int layer, const AccumulatedRebuildPlan& plan, int group, const float* sums, int64_t stride,
               bool) override {
    scratch_.resize(plan.total);
    AccumulatedRebuildArgs a;
    a.old_data = layers_[layer].data();
    a.new_data = scratch_.data();
    a.heads = plan.heads.data();
    a.n_heads = static_cast<int>(plan.heads.size());
    a.group = group;
    a.map = plan.map.data();
    a.sums = sums;
    a.sums_stride = stride;
    for (size_t x = 0; x < plan.total; ++x) accumulated_rebuild_element(a, x);
    layers_[layer].swap(scratch_);
  }
  const float* data(int layer) const override { return layers_[layer].data(); }
  void download(int layer, size_t offset, size_t count, float* out) const override {
    std::copy_n(layers_[layer].data() + offset, count, out);
  }

 private:
  std::vector<std::vector<float>> layers_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<AccumulatedAttentionStore> make_accumulated_attention_store(SelectionDevice device) {
  switch (device) {
    case SelectionDevice::Host: return nullptr;
    case SelectionDevice::Twin: return std::make_unique<TwinAccumulatedAttention>();
    case SelectionDevice::Cuda:
#ifdef KVEVICT_HAVE_CUDA
      return cuda::make_cuda_accumulated_attention();
#else
      throw RuntimeError("accumulated attention on the device: this build has no CUDA (configure with the CUDA toolkit)");
#endif
  }
  throw std::logic_error("make_accumulated_attention_store: unknown SelectionDevice");
}

}  // namespace kvevict
