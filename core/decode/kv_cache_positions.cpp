// Position re-assignment inside the cache (contract in kv_cache.h). StreamingLLM's official code
// keeps keys without RoPE and rotates them to their index in the cache at every step; this cache
// stores post-RoPE keys, so re-assignment rotates each moved key back by its old position and
// forward by its new one. Only entries whose position changes are touched, so a head that lost
// nothing stays bit-identical (the "budget = full length" case equals the plain decoder exactly).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/kv_cache.h"

namespace kvevict {

void KVCache::reassign_positions(int layer, int kv_head) {
  if (layer < 0 || layer >= n_layers_ || kv_head < 0 || kv_head >= n_kv_heads_) {
    throw std::invalid_argument("KVCache::reassign_positions: no (layer " + std::to_string(layer) + ", KV head " +
                                std::to_string(kv_head) + ")");
  }
  const bool rows_here = !rows_held_elsewhere(layer, kv_head);
  Head& h = head(layer, kv_head);
  h.reassigned = true;
  h.stamp.renew();
  const int len = static_cast<int>(h.positions.size());
  if (len == 0) {
    if (listener_.ptr) listener_.ptr->on_reassign(layer, kv_head);
    return;
  }
  // The cache's own table serves both rotations (lookups equal direct evaluation, rope.h), so a
  // per-step re-assignment costs table reads, not trigonometry; reserved also where the rows are
  // elsewhere, for their holder (rope_table()).
  const int32_t max_position = *std::max_element(h.positions.begin(), h.positions.end());
  reserve_rope(std::max(max_position, len - 1));
  if (!rows_here) {
    h.norms_held = false;  // the holder's rotation changes them by rounding
    h.held_norms.clear();
  } else if (!h.codebook) {
    // An F16/BF16 key is rotated in f32 and rounded once when stored back.
    std::vector<float> key(static_cast<size_t>(head_dim_));
    for (int t = 0; t < len; ++t) {
      if (h.positions[t] == t) continue;
      h.keys.read(t, t + 1, key.data());
      rope_.rerotate(key.data(), h.positions[t], t);  // the device's bits too (device_kv_reassign.h)
      h.keys.write(t, key.data());
    }
  }
  for (int t = 0; t < len; ++t) h.positions[t] = t;
  if (listener_.ptr) listener_.ptr->on_reassign(layer, kv_head);
}

bool KVCache::any_positions_reassigned() const {
  return std::any_of(heads_.begin(), heads_.end(), [](const Head& h) { return h.reassigned; });
}

}  // namespace kvevict
