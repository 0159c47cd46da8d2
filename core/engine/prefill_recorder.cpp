#include <algorithm>

#include "core/engine/engine.h"

namespace kvevict {

PrefillRecorder::PrefillRecorder(int window, bool accumulated_attention) {
  request_.window = std::max(0, window);
  request_.accumulated_attention = accumulated_attention;
}

ObservationRequest PrefillRecorder::request() const { return request_; }

void PrefillRecorder::request_model_signals(const ModelSignals& wanted) {
  request_.hidden_norms = wanted.hidden_norms;
  request_.hidden_states = wanted.hidden_states;
  request_.output_grams = wanted.output_grams;
  request_.output_projection = wanted.output_projection;
}

void PrefillRecorder::after_layer(const LayerSignals& signals, KVCache& cache) {
  (void)cache;
  if (signals.layer == 0) {
    layers_.clear();
    first_position_ = signals.first_position;
    n_tokens_ = signals.n_tokens;
    tokens_.assign(signals.tokens.begin(), signals.tokens.end());
  }
  if (static_cast<int>(layers_.size()) <= signals.layer) layers_.resize(signals.layer + 1);
  Layer& layer = layers_[signals.layer];
  layer.window = signals.window;
  layer.window_queries.assign(signals.window_queries.begin(), signals.window_queries.end());
  if (signals.accumulated_attention) layer.accumulated_attention = *signals.accumulated_attention;
  else layer.accumulated_attention.clear();
  layer.hidden_norms.assign(signals.hidden_norms.begin(), signals.hidden_norms.end());
  layer.output_grams.assign(signals.output_grams.begin(), signals.output_grams.end());
  layer.output_projection.assign(signals.output_projection.begin(), signals.output_projection.end());
  layer.hidden_states.assign(signals.hidden_states.begin(), signals.hidden_states.end());
}

}  // namespace kvevict
