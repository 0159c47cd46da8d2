#pragma once
// The accumulated attention (A_acc) held on the device that scores it (issue 10), so that a decode
// step of H2O neither downloads the decoder's column sums nor uploads A_acc: the engine adds each
// block's device column sums, applies its keeps, and hands each stored head's [group][T] block to
// the generated kernels in place. The engine holds it here when its program scores device signals
// and selects on a device (EvictionEngine, `accumulated_in_place`); else in host vectors.
//
// Contract: after the same blocks and keeps, head() holds bit for bit the host engine's
// accumulated attention (accumulated_rebuild.h: one float add per block, keeps by index). Keeps are
// recorded on the host and applied at the next add or read, fused with it: one launch per layer and
// call (not one per head and keep). Memory on the device: per layer, group x its entries floats,
// plus one scratch buffer as large as the largest layer (a rebuild writes it, then the two swap).
// Not thread-safe except head(), which may be called from the engine's parallel scoring loops.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/decode/column_sums_signal.h"
#include "core/engine/accumulated_rebuild.h"
#include "core/engine/policy_modes.h"

namespace kvevict {

class AccumulatedAttentionStore {
 public:
  virtual ~AccumulatedAttentionStore() = default;
  virtual SelectionDevice device() const = 0;

  // Empties every layer: n_layers layers of n_heads stored heads, `group` query heads each.
  void reset(int n_layers, int n_heads, int group);
  // Adds a block's column sums to `layer`, whose stored heads now have `lengths` entries (as the
  // sums saw them). The sums are memory of the store's device (a decoder's, column_sums_signal.h) or,
  // from a decoder that made them on the host, [n_heads * group][length of the head] host vectors.
  void add(int layer, std::span<const int64_t> lengths, const ColumnSumsSignal& device_sums);
  void add(int layer, std::span<const int64_t> lengths, const std::vector<std::vector<float>>& host_sums);
  // Records that stored head `head` of `layer` kept `kept` (indices below `length`, its entries
  // before the keep), in that order.
  void keep(int layer, int head, std::span<const int> kept, int64_t length);
  // Head `head`'s block [group][lengths[head]] in the store's device memory, the layer rebuilt first
  // when keeps or appends are pending (`lengths`: the layer's stored heads' entries now). Valid
  // until the next call that changes the layer.
  const float* head(int layer, std::span<const int64_t> lengths, int head);
  // The same block copied to the host (tests, reports).
  std::vector<float> read(int layer, std::span<const int64_t> lengths, int head);
  // Entries each head of `layer` gives now (after its recorded keeps; appends not yet seen excluded).
  std::vector<int64_t> lengths(int layer) const;

 protected:
  // Runs `plan` over `layer`'s held buffer into a scratch buffer with the given sums (device memory,
  // or host memory [n_heads * group][stride] when sums_on_host; null: none), then makes the scratch
  // the layer's buffer. Implementations hold the memory.
  virtual void rebuild(int layer, const AccumulatedRebuildPlan& plan, int group, const float* sums, int64_t stride,
                       bool sums_on_host) = 0;
  virtual void resize_layers(int n_layers) = 0;
  // The layer's buffer (device memory) and a copy of `count` floats from `offset` to the host.
  virtual const float* data(int layer) const = 0;
  virtual void download(int layer, size_t offset, size_t count, float* out) const = 0;

 private:
  void rebuild_layer(int layer, std::span<const int64_t> lengths, const float* sums, int64_t stride, bool on_host);
  bool current(int layer, std::span<const int64_t> lengths) const;
  void check_layer(int layer, size_t n_lengths) const;

  int group_ = 1;
  std::vector<std::vector<AccumulatedHeadBook>> book_;  // [layer][stored head]
  std::vector<float> host_sums_;                         // host sums packed [n_heads * group][stride]
  std::mutex flush_;
};

// The store for `device`: Twin (host memory, the kernel's element body on the CPU: the tests'
// stand-in device) or Cuda (the current CUDA device). Host: null (the engine's host vectors).
// Cuda in a build without CUDA throws RuntimeError.
std::unique_ptr<AccumulatedAttentionStore> make_accumulated_attention_store(SelectionDevice device);

}  // namespace kvevict
