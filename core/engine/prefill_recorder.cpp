#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/replay_prompt.h"

namespace kvevict {
namespace {

// One kind of prompt signal a sweep reads (A_seg, the query statistics), one value per request: the
// decoder's `given` for a single request, else each made by `make` from every query of the prompt,
// which the decoder handed over for the call (`every_query`).
template <class Request, class Value, class Make>
void record_requested(const std::vector<Request>& requests, const Value* given, bool every_query, const char* what,
                      std::vector<Value>& out, Make make) {
  out.clear();
  if (requests.size() == 1) {
    if (!given) throw std::logic_error(std::string("prefill recorder: the decoder handed no ") + what);
    out.push_back(*given);
  } else if (!requests.empty()) {
    if (!every_query)
      throw std::logic_error(std::string("prefill recorder: several ") + what +
                             " need the whole prompt's queries in one call from position 0");
    for (const Request& r : requests) out.push_back(make(r));
  }
}

}  // namespace

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
  const float* queries = signals.window_queries.data();
  record_requested(segment_requests_, signals.segment_attention, every_query, "A_seg", layer.segment_attention,
                   [&](const SegmentAttentionRequest& r) {
                     return block_segment_attention(r, queries, signals.n_tokens, cache, signals.layer, n_heads);
                   });
  record_requested(statistics_requests_, signals.query_statistics, every_query, "query statistics",
                   layer.query_statistics, [&](const QueryStatisticsRequest& r) {
                     return block_query_statistics(queries, signals.n_tokens, 0, r, n_heads, cache.head_dim(), rope_);
                   });
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
