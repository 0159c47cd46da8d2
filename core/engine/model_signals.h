#pragma once
// The model signals of the policy language (core/engine/signals.h):
//   token[t]        the token id of entry t (a float holding an integer: exact for ids < 2^24),
//   hidden_norm[t]  the L2 norm of the layer's input hidden state at entry t's token: the residual
//                   stream entering the layer, BEFORE its attention norm (after an RMSNorm every
//                   row's norm is nearly the same, so the pre-norm value is the informative one),
//   out_norm[h, t]  ||W_o,h v_t||, entry t's value through the slice of the output projection
//                   that reads query head h (h over the group, as A's h axis),
//   out_norm_l1[h, t]  ||W_o,h v_t||_1, the same vector's L1 norm (from W_o itself, handed over per
//                   layer on request: LayerSignals::output_projection).
// token and hidden_norm are recorded by ORIGINAL position as the decoder hands each block over
// (LayerSignals::tokens / hidden_norms), and read through the entries' original positions: so they
// stay aligned with the cache through evictions, compaction, merges, GQA unfolding, re-assigned
// positions and decode appends without per-entry bookkeeping. Memory: one int per token seen and,
// when hidden_norm is read, one float per (layer, token seen); positions are capped at
// kMaxRecordedPositions (a usage error beyond). A position never handed over reads token -1 and
// hidden_norm 0. out_norm needs no record: it is computed from the cache's values (dense or
// reconstructed) and the layer's Gram matrices G_h = W_o,h^T W_o,h (LayerSignals::output_grams) as
// sqrt(v^T G_h v), in double.
//   hidden[c, t]    the layer's attention input at entry t's token (LayerSignals::hidden_states:
//                   after the input RMSNorm, what kvpress hands a press), recorded by original
//                   position like hidden_norm: n_embd floats per (layer, token seen), only when a
//                   policy reads it, at most kMaxHiddenStateFloats in all (a usage error beyond).
//                   A policy that reads it only in the call that hands it over (score_at insertion
//                   with a decode indicator that scores each entry alone: dsl/entry_locality.h)
//                   records the current call's layer alone: n_embd floats per token of one block,
//                   or nothing where the decoder handed that block over on its device alone
//                   (LayerSignals::hidden_states_on_device: read in place there).
#include <cstdint>
#include <vector>

#include "core/decode/decoder.h"

namespace kvevict {

constexpr int kMaxRecordedPositions = 1 << 26;
constexpr int64_t kMaxHiddenStateFloats = int64_t(1) << 30;  // 4 GiB of recorded hidden states

class PositionRecords {
 public:
  // Forgets everything; records token ids and / or hidden norms from now on, and the hidden
  // states (n_embd floats per token) when hidden_width = n_embd > 0: every layer's of every
  // position seen, or with `states_of_current_call` only the last recorded block's, of its layer
  // (each record replaces the one before; reading any other is a std::logic_error).
  void reset(int n_layers, bool tokens, bool hidden_norms, int hidden_width = 0, bool states_of_current_call = false);
  // Takes the block's tokens (layer 0) and the layer's hidden norms, at positions first_position...
  void record(const LayerSignals& s);
  // out[t] = the token id at positions[t] (-1 if none was recorded).
  void tokens(const int32_t* positions, int T, float* out) const;
  // out[t] = layer's hidden norm at positions[t] (0 if none was recorded).
  void hidden_norms(int layer, const int32_t* positions, int T, float* out) const;
  // out[c * T + t] = layer's hidden state channel c at positions[t] (0 if none was recorded): the
  // signal layout [c][t].
  void hidden_states(int layer, const int32_t* positions, int T, float* out) const;
  // Floats of hidden states held now, all layers (what the records cost).
  int64_t hidden_state_floats() const { return state_floats_; }

 private:
  void record_states(const LayerSignals& s, int64_t end);
  void current_hidden_states(int layer, const int32_t* positions, int T, float* out) const;

  bool tokens_on_ = false, hidden_on_ = false;
  std::vector<int32_t> token_;               // [position]
  std::vector<std::vector<float>> hidden_;   // [layer][position]
  int width_ = 0;                            // n_embd when hidden states are recorded, else 0
  int64_t state_floats_ = 0;                 // floats held by states_, all layers
  std::vector<std::vector<float>> states_;   // [layer][position][n_embd]; current call only: [1][block][n_embd]
  bool current_call_only_ = false;
  int current_layer_ = -1;                   // current call only: the block's layer and first position
  int64_t current_first_ = 0;
};

// out[g][t] = sqrt(v_t^T G_h v_t) with h = kv_head * group + g, G_h the [d][d] block h of `grams`
// ([n_heads][d][d]) and v_t row t of values ([T][d]).
void output_norms(const float* grams, int kv_head, int group, int d, const float* values, int T, float* out);

// out[g][t] = ||W_o,h v_t||_1 = sum over the dim output features i of |W_o,h[i] . v_t| (CriticalKV's
// and DefensiveKV's projected value norm), h = kv_head * group + g, W_o,h the [dim][d] slice h of
// `projection` ([n_heads][dim][d], LayerSignals::output_projection), in double, rounded once.
void output_norms_l1(const float* projection, int dim, int kv_head, int group, int d, const float* values, int T, float* out);

}  // namespace kvevict
