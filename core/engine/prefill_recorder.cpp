#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "core/engine/engine.h"
#include "core/engine/replay_prompt.h"

namespace kvevict {

PrefillRecorder::PrefillRecorder(int window, bool accumulated_attention) {
  request_.window = std::max(0, window);
  window_ = kept_window_ = request_.window;
  request_.accumulated_attention = accumulated_attention;
}

ObservationRequest PrefillRecorder::request() const { return request_; }

void PrefillRecorder::request_model_signals(const ModelSignals& wanted) {
  request_.hidden_norms = wanted.hidden_norms;
  request_.hidden_states = wanted.hidden_states;
  request_.output_grams = wanted.output_grams;
  request_.output_projection = wanted.output_projection;
}

void PrefillRecorder::request_query_statistics(std::vector<QueryStatisticsRequest> wanted, const ModelConfig& config,
                                               int prompt_len) {
  for (const QueryStatisticsRequest& r : wanted)
    if (!r.enabled) throw std::invalid_argument("prefill recorder: a query statistics request not enabled");
  statistics_requests_ = std::move(wanted);
  if (statistics_requests_.size() > 1) rope_ = Rope(config);
  prompt_len_ = prompt_len;
  ask_the_decoder();
}

void PrefillRecorder::request_segment_attention(std::vector<SegmentAttentionRequest> wanted, int prompt_len) {
  for (const SegmentAttentionRequest& r : wanted)
    if (!r.enabled()) throw std::invalid_argument("prefill recorder: a segment attention request not enabled");
  segment_requests_ = std::move(wanted);
  prompt_len_ = prompt_len;
  ask_the_decoder();
}

void PrefillRecorder::keep_windows_found_from_tokens(std::vector<const PolicyProgram*> policies, int prompt_len) {
  token_windows_ = std::move(policies);
  prompt_len_ = prompt_len;
  ask_the_decoder();
}

void PrefillRecorder::ask_the_decoder() {
  request_.query_statistics = statistics_requests_.size() == 1 ? statistics_requests_[0] : QueryStatisticsRequest{};
  request_.segment_attention = segment_requests_.size() == 1 ? segment_requests_[0] : SegmentAttentionRequest{};
  // Every query of the prompt is handed over for the call (a view on the CPU); kept_window_ rows kept.
  const bool every = statistics_requests_.size() > 1 || segment_requests_.size() > 1 || !token_windows_.empty();
  request_.window = every ? std::max(window_, prompt_len_) : window_;
}

const BlockQueryStatistics* PrefillRecorder::query_statistics(int layer, const PolicyDescription& d) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return nullptr;
  const Layer& l = layers_[static_cast<size_t>(layer)];
  for (size_t i = 0; i < statistics_requests_.size() && i < l.query_statistics.size(); ++i)
    if (query_statistics_serve(statistics_requests_[i], d)) return &l.query_statistics[i];
  return nullptr;
}

const BlockSegmentAttention* PrefillRecorder::segment_attention(int layer, const SegmentAttentionRequest& request) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) return nullptr;
  const Layer& l = layers_[static_cast<size_t>(layer)];
  for (size_t i = 0; i < segment_requests_.size() && i < l.segment_attention.size(); ++i)
    if (segment_requests_[i] == request) return &l.segment_attention[i];
  return nullptr;
}

void PrefillRecorder::after_layer(const LayerSignals& signals, KVCache& cache) {
  if (signals.layer == 0) {
    layers_.clear();
    first_position_ = signals.first_position;
    n_tokens_ = signals.n_tokens;
    tokens_.assign(signals.tokens.begin(), signals.tokens.end());
    replays_.clear();  // a new recording: the replays of the previous one are stale
    // The windows found from this prompt's tokens (FinchPress's delimiter), kept for every layer.
    kept_window_ = window_;
    for (const PolicyProgram* p : token_windows_)
      kept_window_ = std::max(kept_window_, recorded_window_for(*p, n_tokens_, {}, {}, tokens_));
  }
  if (static_cast<int>(layers_.size()) <= signals.layer) layers_.resize(signals.layer + 1);
  Layer& layer = layers_[signals.layer];
  // The newest kept_window_ rows of those handed over.
  const int kept = std::min(kept_window_, signals.window);
  const size_t row = signals.window > 0 ? signals.window_queries.size() / static_cast<size_t>(signals.window) : 0;
  layer.window = kept;
  layer.window_queries.assign(signals.window_queries.end() - static_cast<std::ptrdiff_t>(kept * row),
                              signals.window_queries.end());
  // A_seg and the query statistics: the decoder's for a single request, else by the host rule from
  // every query of the prompt (handed over for it) and the host's rows.
  const bool every_query = signals.first_position == 0 && signals.window == signals.n_tokens && row > 0;
  const int n_heads = row > 0 ? static_cast<int>(row / static_cast<size_t>(cache.head_dim())) : 0;
  layer.segment_attention.clear();
  if (segment_requests_.size() == 1) {
    if (!signals.segment_attention) throw std::logic_error("prefill recorder: the decoder handed no A_seg");
    layer.segment_attention.push_back(*signals.segment_attention);
  } else if (!segment_requests_.empty()) {
    if (!every_query)
      throw std::logic_error("prefill recorder: A_seg needs the whole prompt's queries in one call from position 0");
    for (const SegmentAttentionRequest& r : segment_requests_)
      layer.segment_attention.push_back(
          block_segment_attention(r, signals.window_queries.data(), signals.n_tokens, cache, signals.layer, n_heads));
  }
  layer.query_statistics.clear();
  if (statistics_requests_.size() == 1) {
    if (!signals.query_statistics) throw std::logic_error("prefill recorder: the decoder handed no query statistics");
    layer.query_statistics.push_back(*signals.query_statistics);
  } else if (!statistics_requests_.empty()) {
    if (!every_query)
      throw std::logic_error(
          "prefill recorder: several query statistics need the whole prompt's queries in one call from position 0");
    for (const QueryStatisticsRequest& r : statistics_requests_)
      layer.query_statistics.push_back(block_query_statistics(signals.window_queries.data(), signals.n_tokens, 0, r,
                                                              n_heads, cache.head_dim(), rope_));
  }
  if (signals.accumulated_attention) layer.accumulated_attention = *signals.accumulated_attention;
  else layer.accumulated_attention.clear();
  layer.hidden_norms.assign(signals.hidden_norms.begin(), signals.hidden_norms.end());
  layer.output_grams.assign(signals.output_grams.begin(), signals.output_grams.end());
  layer.output_projection.assign(signals.output_projection.begin(), signals.output_projection.end());
  layer.hidden_states.assign(signals.hidden_states.begin(), signals.hidden_states.end());
}

void PrefillRecorder::record_replay(Decoder& decoder, const PolicyObserve::Replay& settings) {
  if (first_position_ != 0 || static_cast<int>(tokens_.size()) != n_tokens_ || n_tokens_ == 0)
    throw std::invalid_argument("record_replay: the recorder holds no whole prompt from position 0");
  const ReplayOptions options = replay_options(settings);
  if (replay(options)) return;  // one replay per setting and recording
  replays_.emplace_back(options, run_policy_replay(decoder, tokens_, settings));
}

const ReplayScores* PrefillRecorder::replay(const ReplayOptions& options) const {
  for (const auto& [o, scores] : replays_)
    if (o == options) return &scores;
  return nullptr;
}

}  // namespace kvevict
