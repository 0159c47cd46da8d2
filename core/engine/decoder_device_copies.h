#pragma once
// What the decoder handed the eviction engine in its device memory for the current after_layer
// call (LayerSignals::cache_rows, cached_positions, hidden_states_on_device): the layer's cached
// rows (K, V, K_pre and the rows' norms) and the description of its positions, each held until
// that layer's cache changes (forget) or the call ends (forget_all), and the block's attention
// inputs, held until the call ends. A head is served only while it is exactly as long as the copy
// says: a copy of another length is not this head's entries any more; the attention inputs only
// to entries that are exactly the block's tokens.
#include <cstdint>
#include <vector>

#include "core/decode/cache_rows_signal.h"
#include "core/decode/cached_positions_signal.h"
#include "core/decode/hidden_states_signal.h"
#include "core/engine/signals.h"

namespace kvevict {

class DecoderDeviceCopies {
 public:
  // `head_dim`, `group`: the model's (query heads per KV head). `unfolded`: the policy unfolds GQA,
  // so its stored heads are query heads and not the device cache's KV heads: nothing is served then.
  DecoderDeviceCopies(int head_dim, int group, bool unfolded) : head_dim_(head_dim), group_(group), unfolded_(unfolded) {}

  void hold_rows(int layer, const CacheRowsSignal& rows) {
    rows_ = rows;
    rows_layer_ = layer;
  }
  void hold_positions(int layer, const CachedPositionsSignal& positions) {
    positions_ = positions;
    positions_layer_ = layer;
  }

  // `first_position`: the position of the block's first token (LayerSignals::first_position).
  void hold_hidden_states(int layer, int first_position, const HiddenStatesSignal& hidden) {
    hidden_ = hidden;
    hidden_layer_ = layer;
    hidden_first_ = first_position;
  }

  // hidden[c, t] ([dim][T]) of `layer`'s entries at `positions` (T of them) in the decoder's device
  // copy, when it handed one over in this call and those entries are exactly the block's tokens in
  // order (a prompt's head before any eviction, a decode step's new entries); null otherwise.
  const float* hidden_states_of(int layer, const int32_t* positions, int T) const;
  bool holds_hidden_states(int layer) const { return !hidden_.empty() && layer == hidden_layer_; }

  // K, V or K_pre ([d][T]), key_norm or value_norm ([T]), out_norm_l1 ([group][T]) of stored head
  // `src` of `layer` (T entries) in the decoder's device copy, when it made one for this call and the head is exactly
  // that long; null otherwise (the host's rows, or its held norms, then).
  const float* rows_of(TensorSignal id, int layer, int src, int T) const;

  // The description of `layer`'s positions when the decoder handed one over in this call and the
  // layer is unchanged since; null too when the cache's positions were re-assigned
  // (`reassigned`: the programs read the original ones, which the device cache does not hold).
  const CachedPositionsSignal* positions_for(int layer, bool reassigned) const;
  // The positions of stored head `src` of `layer` (T entries) there; null unless it is exactly
  // that long (the host's are uploaded then, if a program reads them).
  const int32_t* positions_of(int layer, int src, int T, bool reassigned) const;
  // Every head of `layer` at once, for a selection from the selector's buffer: null unless all of
  // them are exactly as long as `lengths`.
  const CachedPositionsSignal* positions_for_selection(int layer, const std::vector<int64_t>& lengths,
                                                       bool reassigned) const;

  // Forgets the copies of `layer` (its cache changed; the attention inputs stay, they are the
  // block's), or of every layer (the call ended).
  void forget(int layer);
  void forget_all() { forget(-1); }

 private:
  int head_dim_;
  int group_;
  bool unfolded_;
  CacheRowsSignal rows_;
  int rows_layer_ = -1;
  CachedPositionsSignal positions_;
  int positions_layer_ = -1;
  HiddenStatesSignal hidden_;
  int hidden_layer_ = -1;
  int hidden_first_ = 0;
};

}  // namespace kvevict
