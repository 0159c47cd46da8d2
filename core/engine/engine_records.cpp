// What the engine records of the decoder's hand-over for the signals (EvictionEngine::State,
// engine_state.h): each call's query rows, window attention, model signals (tokens, hidden states,
// the output projection), accumulated attention and merge state; the prompt layer's hidden states
// gathered once for its heads. The per-head gathers that read them are engine_signals.cpp's.
#include "core/engine/engine_state.h"

namespace kvevict {

void EvictionEngine::State::record_query_and_model_signals(const LayerSignals& s) {
  records.record(s);
  report.hidden_state_floats_peak = std::max(report.hidden_state_floats_peak, records.hidden_state_floats());
  output_grams = s.output_grams;
  output_projection = s.output_projection;
  if (!query_stats.active() || !in_prefill) return;
  if (s.query_statistics) return query_stats.merge(s.layer, *s.query_statistics);  // the decoder's (request())
  // Else from every query of the block (a recorded prefill: apply_after_prefill).
  if (s.window != s.n_tokens)
    throw std::logic_error("engine: Q_mean needs the block's query statistics or every query of the prompt; the "
                           "decoder handed no statistics and " +
                           std::to_string(s.window) + " of " + std::to_string(s.n_tokens) + " queries");
  query_stats.record(s.layer, s.window_queries.data(), s.n_tokens, s.first_position, rope);
}

void EvictionEngine::State::share_layer_hidden_states(int layer, const KVCache& cache) {
  // layer_hidden is empty here: score_layer_at_prefill drops it once each layer is scored. Not
  // where the decoder handed them over on its device (each head reads that block in place).
  if (Hs < 2 || decoder_copies.holds_hidden_states(layer) || !makes_signal(TensorSignal::HiddenState, false, nullptr) ||
      !phase_reads(false)[signal_index(TensorSignal::HiddenState)])
    return;
  const int first = cache_head(0, cache), T = cache.length(layer, first);
  const int32_t* p = positions(cache, layer, first);
  for (int h = 1; h < Hs; ++h) {
    const int src = cache_head(h, cache);
    if (cache.length(layer, src) != T || !std::equal(p, p + T, positions(cache, layer, src))) return;
  }
  layer_hidden.data.resize(static_cast<size_t>(config.dim) * T);
  records.hidden_states(layer, p, T, layer_hidden.data.data());
  layer_hidden.layer = layer;
  layer_hidden.T = T;
  ++report.hidden_state_layer_gathers;
}

void EvictionEngine::State::record_queries(const LayerSignals& s) {
  recent.record(s.layer, s.window_queries.data(), s.window, s.first_position + s.n_tokens - s.window, query_window());
}

void EvictionEngine::State::offer_window_attention(const LayerSignals& s, const KVCache& cache) {
  if (!decoder_window_attention() || original.active()) return;
  const WindowRows r = window_rows(s.layer);
  window_in.offer(s, r.W, r.first, G, desc.observe.causal, cache);
}

std::vector<int64_t> EvictionEngine::State::stored_lengths(const KVCache& cache, int layer) const {
  std::vector<int64_t> lengths(static_cast<size_t>(Hs));
  for (int h = 0; h < Hs; ++h) lengths[h] = cache.length(layer, h);
  return lengths;
}

void EvictionEngine::State::record_accumulated(const LayerSignals& s, const KVCache& cache) {
  if (!desc.needs(TensorSignal::AccumulatedAttention)) return;
  if (device_reads.accumulated_in_place) {
    const std::vector<int64_t> lengths = stored_lengths(cache, s.layer);
    if (!s.column_sums_on_device.empty()) {
      accumulated_device->add(s.layer, lengths, s.column_sums_on_device);
      ++report.accumulated_attention_device_adds;
    } else if (s.accumulated_attention) {
      accumulated_device->add(s.layer, lengths, *s.accumulated_attention);
    } else {
      throw std::logic_error("engine: the decoder did not record accumulated attention");
    }
    return;
  }
  if (!s.accumulated_attention) throw std::logic_error("engine: the decoder did not record accumulated attention");
  auto& acc = accumulated[s.layer];
  acc.resize(Hq);
  for (int h = 0; h < Hq; ++h) {
    const std::vector<float>& add = (*s.accumulated_attention)[h];
    const int T = cache.length(s.layer, cache.stored_head_of_query(h));
    acc[h].resize(T, 0.0f);
    for (int t = 0; t < T && t < static_cast<int>(add.size()); ++t) acc[h][t] += add[t];
  }
}

void EvictionEngine::State::record_layer_signals(const LayerSignals& s, const KVCache& cache, bool decoding) {
  PhaseScope timed(clock, EnginePhase::Signals);
  record_queries(s);
  offer_window_attention(s, cache);
  record_query_and_model_signals(s);
  // A_seg: the decoder's (held for this after_layer), else from the prompt's queries when the
  // whole block was handed over (a window of every query; any fewer would miss segments).
  segment_given = decoding ? nullptr : s.segment_attention;
  segment_given_layer = s.layer;
  if (!decoding && desc.observe.segment > 0 && !segment_given && s.window == s.n_tokens)
    segments.record(s.layer, s.window_queries.data(), s.window, s.first_position + s.n_tokens - s.window);
  record_accumulated(s, cache);
  if (decoding) merge_state.record_decode(s, cache);
}

void EvictionEngine::State::hold_output_projection(const LayerSignals& s) {
  PhaseScope timed(clock, EnginePhase::Signals);
  held_grams.resize(L);
  held_projection.resize(L);
  held_grams[s.layer].assign(s.output_grams.begin(), s.output_grams.end());
  held_projection[s.layer].assign(s.output_projection.begin(), s.output_projection.end());
}

}  // namespace kvevict
