#include "core/engine/model_signals.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/util/error.h"

namespace kvevict {

void PositionRecords::reset(int n_layers, bool tokens, bool hidden_norms, int hidden_width,
                            bool states_of_current_call) {
  tokens_on_ = tokens;
  hidden_on_ = hidden_norms;
  token_.clear();
  hidden_.assign(hidden_norms ? n_layers : 0, {});
  width_ = std::max(hidden_width, 0);
  state_floats_ = 0;
  current_call_only_ = states_of_current_call;
  current_layer_ = -1;
  current_first_ = 0;
  states_.assign(width_ > 0 ? (current_call_only_ ? 1 : n_layers) : 0, {});
}

void PositionRecords::record_states(const LayerSignals& s, int64_t end) {
  const int64_t first = s.first_position;
  // Handed over on the decoder's device alone: read there in their call (the engine's
  // DecoderDeviceCopies), none held here; a read of this block from the records fails as an
  // earlier call's would.
  if (current_call_only_ && s.hidden_states.empty() && !s.hidden_states_on_device.empty()) {
    state_floats_ -= static_cast<int64_t>(states_.at(0).size());
    std::vector<float>().swap(states_.at(0));
    current_layer_ = s.layer;
    current_first_ = first;
    return;
  }
  if (s.hidden_states.size() != static_cast<size_t>(s.n_tokens) * width_)
    throw UsageError("the policy reads hidden, but the decoder did not record the layer's attention inputs");
  // The current call's block alone: it replaces the one before (whose reads are over).
  const int64_t held_from = current_call_only_ ? first : 0;
  std::vector<float>& h = states_.at(current_call_only_ ? 0 : s.layer);
  if (current_call_only_) {
    state_floats_ -= static_cast<int64_t>(h.size());
    h.clear();
    current_layer_ = s.layer;
    current_first_ = first;
  }
  const int64_t need = (end - held_from) * width_;
  if (static_cast<int64_t>(h.size()) < need) {
    if (state_floats_ + need - static_cast<int64_t>(h.size()) > kMaxHiddenStateFloats)
      throw UsageError("the hidden-state records would exceed " + std::to_string(kMaxHiddenStateFloats) +
                       " floats (n_embd x tokens" + (current_call_only_ ? " of one block" : " x layers") +
                       "); the block reaches position " + std::to_string(end - 1));
    state_floats_ += need - static_cast<int64_t>(h.size());
    h.resize(static_cast<size_t>(need), 0.0f);
  }
  std::copy(s.hidden_states.begin(), s.hidden_states.end(), h.begin() + (first - held_from) * width_);
}

void PositionRecords::record(const LayerSignals& s) {
  if (!tokens_on_ && !hidden_on_ && width_ == 0) return;
  const int64_t end = static_cast<int64_t>(s.first_position) + s.n_tokens;
  if (s.first_position < 0 || end > kMaxRecordedPositions)
    throw UsageError("token / hidden_norm records hold positions 0.." + std::to_string(kMaxRecordedPositions - 1) +
                     "; the block reaches position " + std::to_string(end - 1));
  if (tokens_on_ && s.layer == 0 && static_cast<int>(s.tokens.size()) == s.n_tokens) {
    if (static_cast<int64_t>(token_.size()) < end) token_.resize(static_cast<size_t>(end), -1);
    std::copy(s.tokens.begin(), s.tokens.end(), token_.begin() + s.first_position);
  }
  if (hidden_on_) {
    if (static_cast<int>(s.hidden_norms.size()) != s.n_tokens)
      throw UsageError("the policy reads hidden_norm, but the decoder did not record the layer inputs' norms");
    std::vector<float>& h = hidden_.at(s.layer);
    if (static_cast<int64_t>(h.size()) < end) h.resize(static_cast<size_t>(end), 0.0f);
    std::copy(s.hidden_norms.begin(), s.hidden_norms.end(), h.begin() + s.first_position);
  }
  if (width_ > 0) record_states(s, end);
}

void PositionRecords::tokens(const int32_t* positions, int T, float* out) const {
  for (int t = 0; t < T; ++t) {
    const int32_t p = positions[t];
    out[t] = p >= 0 && p < static_cast<int32_t>(token_.size()) ? static_cast<float>(token_[p]) : -1.0f;
  }
}

void PositionRecords::hidden_norms(int layer, const int32_t* positions, int T, float* out) const {
  const std::vector<float>& h = hidden_.at(layer);
  for (int t = 0; t < T; ++t) {
    const int32_t p = positions[t];
    out[t] = p >= 0 && p < static_cast<int32_t>(h.size()) ? h[p] : 0.0f;
  }
}

namespace {

// out[c * T + t] = rows[t][c], or 0 where rows[t] is null (T = rows.size()): [position][c] rows in
// the signal layout [c][t], in tiles of kTile tokens x kTile channels, so that the writes run along t
// and a tile's reads stay in the L1 cache (one token at a time wrote every channel T floats apart).
void gather_transposed(const std::vector<const float*>& rows, int width, float* out) {
  constexpr int kTile = 64;
  const int T = static_cast<int>(rows.size());
  for (int t0 = 0; t0 < T; t0 += kTile) {
    const int t1 = std::min(T, t0 + kTile);
    for (int c0 = 0; c0 < width; c0 += kTile) {
      const int c1 = std::min(width, c0 + kTile);
      for (int c = c0; c < c1; ++c) {
        float* o = out + static_cast<int64_t>(c) * T;
        for (int t = t0; t < t1; ++t) o[t] = rows[t] ? rows[t][c] : 0.0f;
      }
    }
  }
}

}  // namespace

void PositionRecords::hidden_states(int layer, const int32_t* positions, int T, float* out) const {
  if (current_call_only_) return current_hidden_states(layer, positions, T, out);
  const std::vector<float>& h = states_.at(layer);
  const int64_t recorded = width_ > 0 ? static_cast<int64_t>(h.size()) / width_ : 0;
  std::vector<const float*> rows(static_cast<size_t>(std::max(T, 0)));
  for (int t = 0; t < T; ++t) {
    const int32_t p = positions[t];
    rows[t] = p >= 0 && p < recorded ? h.data() + static_cast<size_t>(p) * width_ : nullptr;
  }
  gather_transposed(rows, width_, out);
}

void PositionRecords::current_hidden_states(int layer, const int32_t* positions, int T, float* out) const {
  const std::vector<float>& h = states_.at(0);
  const int64_t held = width_ > 0 ? static_cast<int64_t>(h.size()) / width_ : 0;
  std::vector<const float*> rows(static_cast<size_t>(std::max(T, 0)));
  for (int t = 0; t < T; ++t) {
    const int64_t p = static_cast<int64_t>(positions[t]) - current_first_;
    // Another layer's or an earlier call's state is gone: a read of it would score zeros.
    if (layer != current_layer_ || p < 0 || p >= held)
      throw std::logic_error("engine: the hidden state of layer " + std::to_string(layer) + " position " +
                             std::to_string(positions[t]) + " was read after its call (only layer " +
                             std::to_string(current_layer_) + "'s block from position " +
                             std::to_string(current_first_) + " is held)");
    rows[t] = h.data() + static_cast<size_t>(p) * width_;
  }
  gather_transposed(rows, width_, out);
}

void output_norms(const float* grams, int kv_head, int group, int d, const float* values, int T, float* out) {
  const size_t per_head = static_cast<size_t>(d) * d;
  for (int g = 0; g < group; ++g) {
    const float* G = grams + per_head * (kv_head * group + g);
    for (int t = 0; t < T; ++t) {
      const float* v = values + static_cast<size_t>(t) * d;
      double s = 0;
      for (int a = 0; a < d; ++a) {
        double row = 0;
        for (int b = 0; b < d; ++b) row += static_cast<double>(G[static_cast<size_t>(a) * d + b]) * v[b];
        s += v[a] * row;
      }
      out[static_cast<size_t>(g) * T + t] = static_cast<float>(std::sqrt(std::max(0.0, s)));
    }
  }
}

void output_norms_l1(const float* projection, int dim, int kv_head, int group, int d, const float* values, int T, float* out) {
  // W_o,h is [dim][d]; it is read transposed, in double, so that the inner loop runs over the dim
  // rows at once (contiguous, vectorised). Each row's sum still accumulates its d products in the
  // order b = 0 .. d-1, by explicit fused multiply-adds, and the L1 sum its rows in the order
  // i = 0 .. dim-1: the same bits as the plain per-row loop and as the device's kernel
  // (projected_value_norms.h), whatever the compiler's contraction.
  const size_t per_head = static_cast<size_t>(dim) * d;
  std::vector<double> wt(per_head);  // wt[b * dim + i] = W[i][b]
  std::vector<double> row(static_cast<size_t>(dim));
  for (int g = 0; g < group; ++g) {
    const float* W = projection + per_head * (kv_head * group + g);
    for (int i = 0; i < dim; ++i)
      for (int b = 0; b < d; ++b) wt[static_cast<size_t>(b) * dim + i] = W[static_cast<size_t>(i) * d + b];
    for (int t = 0; t < T; ++t) {
      const float* v = values + static_cast<size_t>(t) * d;
      std::fill(row.begin(), row.end(), 0.0);
      for (int b = 0; b < d; ++b) {
        const double vb = v[b];
        const double* w = wt.data() + static_cast<size_t>(b) * dim;
        for (int i = 0; i < dim; ++i) row[static_cast<size_t>(i)] = std::fma(w[i], vb, row[static_cast<size_t>(i)]);
      }
      double s = 0;
      for (int i = 0; i < dim; ++i) s += std::fabs(row[static_cast<size_t>(i)]);
      out[static_cast<size_t>(g) * T + t] = static_cast<float>(s);
    }
  }
}

}  // namespace kvevict
