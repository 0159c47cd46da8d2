#include "core/engine/decoder_device_copies.h"

namespace kvevict {

const float* DecoderDeviceCopies::rows_of(TensorSignal id, int layer, int src, int T) const {
  const bool norms = id == TensorSignal::KeyNorm || id == TensorSignal::ValueNorm;
  const float* base = id == TensorSignal::Keys          ? rows_.keys
                      : id == TensorSignal::Values      ? rows_.values
                      : id == TensorSignal::KeysPreRope ? rows_.keys_pre_rope
                      : id == TensorSignal::KeyNorm     ? rows_.key_norms
                      : id == TensorSignal::ValueNorm   ? rows_.value_norms
                      : id == TensorSignal::OutputNormL1 && rows_.group == group_ ? rows_.out_norms_l1
                                                        : nullptr;
  if (!base || unfolded_ || layer != rows_layer_ || rows_.head_dim != head_dim_ || src < 0 || src >= rows_.n_heads() ||
      rows_.length[static_cast<size_t>(src)] != T)
    return nullptr;
  if (id == TensorSignal::OutputNormL1) return base + rows_.out_norm_offset(src);
  return base + (norms ? rows_.norm_offset(src) : rows_.offset[static_cast<size_t>(src)]);
}

const CachedPositionsSignal* DecoderDeviceCopies::positions_for(int layer, bool reassigned) const {
  if (positions_.empty() || unfolded_ || reassigned || layer != positions_layer_) return nullptr;
  return &positions_;
}

const int32_t* DecoderDeviceCopies::positions_of(int layer, int src, int T, bool reassigned) const {
  const CachedPositionsSignal* p = positions_for(layer, reassigned);
  if (!p || T <= 0 || src < 0 || src >= p->n_heads() || p->length[static_cast<size_t>(src)] != T) return nullptr;
  return p->data + p->start[static_cast<size_t>(src)];
}

const CachedPositionsSignal* DecoderDeviceCopies::positions_for_selection(int layer,
                                                                          const std::vector<int64_t>& lengths,
                                                                          bool reassigned) const {
  const CachedPositionsSignal* p = positions_for(layer, reassigned);
  return p && p->length == lengths ? p : nullptr;
}

const float* DecoderDeviceCopies::hidden_states_of(int layer, const int32_t* positions, int T) const {
  if (hidden_.empty() || layer != hidden_layer_ || T != hidden_.n_tokens) return nullptr;
  for (int t = 0; t < T; ++t)
    if (positions[t] != hidden_first_ + t) return nullptr;
  return hidden_.data;
}

void DecoderDeviceCopies::forget(int layer) {
  if (layer < 0 || layer == rows_layer_) {
    rows_ = {};
    rows_layer_ = -1;
  }
  if (layer < 0 || layer == positions_layer_) {
    positions_ = {};
    positions_layer_ = -1;
  }
  if (layer < 0) {
    hidden_ = {};
    hidden_layer_ = -1;
  }
}

}  // namespace kvevict
