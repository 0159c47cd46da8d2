#pragma once
// The bookkeeping of a layer selector's per-layer score buffers (LayerSelector::layer_score_buffer),
// shared by the twin (host vectors) and the CUDA selector (device arrays): which layers hold a
// buffer, the head lengths each was laid for, and their release. `Scores` is the storage; the
// selector sizes and fills it. Node-based, so a buffer never moves (a DeviceArray cannot).
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvevict {

template <typename Scores>
class LayerScoreBuffers {
 public:
  struct Buffer {
    Scores scores;
    std::vector<int64_t> lengths;
  };
  // Layer `layer`'s buffer, now laid for heads of `lengths` entries (its storage as it was).
  Buffer& lay(int layer, std::span<const int64_t> lengths) {
    Buffer& b = buffers_[layer];
    b.lengths.assign(lengths.begin(), lengths.end());
    return b;
  }
  // The buffer of a layer that holds one; std::logic_error otherwise.
  Buffer& laid(int layer) {
    const auto it = buffers_.find(layer);
    if (it == buffers_.end()) throw std::logic_error("layer selector: layer " + std::to_string(layer) + " has no score buffer");
    return it->second;
  }
  std::vector<int64_t> lengths(int layer) const {
    const auto it = buffers_.find(layer);
    return it == buffers_.end() ? std::vector<int64_t>{} : it->second.lengths;
  }
  void release(int layer) { buffers_.erase(layer); }
  void release_all() { buffers_.clear(); }

 private:
  std::map<int, Buffer> buffers_;
};

}  // namespace kvevict
