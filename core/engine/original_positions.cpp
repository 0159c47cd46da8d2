#include "core/engine/original_positions.h"

#include <stdexcept>
#include <string>

namespace kvevict {

void OriginalPositions::clear() {
  active_ = false;
  positions_.clear();
}

void OriginalPositions::start_and_reassign(KVCache& cache) {
  positions_.assign(cache.n_layers(), std::vector<std::vector<int32_t>>(cache.n_kv_heads()));
  for (int l = 0; l < cache.n_layers(); ++l) {
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      positions_[l][h].assign(cache.positions(l, h), cache.positions(l, h) + cache.length(l, h));
      cache.reassign_positions(l, h);
    }
  }
  active_ = true;
}

void OriginalPositions::appended(int layer, const KVCache& cache, int first_position) {
  if (!active_) return;
  for (int h = 0; h < cache.n_kv_heads(); ++h) {
    std::vector<int32_t>& p = positions_[layer][h];
    const int len = cache.length(layer, h);
    if (static_cast<int>(p.size()) > len)
      throw std::logic_error("OriginalPositions: layer " + std::to_string(layer) + " shrank outside the engine");
    // The block's entries are the newest ones; the first of them has sequence index first_position.
    const int32_t base = first_position - static_cast<int32_t>(p.size());
    for (int t = static_cast<int>(p.size()); t < len; ++t) p.push_back(base + t);
  }
}

void OriginalPositions::kept(int layer, int kv_head, std::span<const int> indices) {
  if (!active_) return;
  std::vector<int32_t>& p = positions_[layer][kv_head];
  std::vector<int32_t> next(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) next[i] = p[indices[i]];
  p.swap(next);
}

void OriginalPositions::reassign_layer(KVCache& cache, int layer) {
  for (int h = 0; h < cache.n_kv_heads(); ++h) cache.reassign_positions(layer, h);
}

}  // namespace kvevict
