// The eviction engine. Flow of one prompt (decoder forward #1): after_layer(l) records the layer's
// signals, computes its scores once (kept aligned with cache order) and, when cascading, re-splits
// the budget over layers 0..l and shrinks them all; otherwise the one-shot split happens at the last
// layer. after_forward ends the prefill (report, codebook stage). Later forward calls are decode
// steps: after_layer(l) applies the decode trigger of layer l.
#include <algorithm>

#include "core/engine/engine_state.h"

namespace kvevict {

EvictionEngine::State::State(const PolicyProgram& p, const ModelConfig& c, EngineOptions o)
    : policy(p),
      desc(p.description()),
      config(c),
      options(std::move(o)),
      plan(plan_before_prompt(p, plan_geometry(p, c, options.budget), options.budget)),  // checks the policy
      L(plan.geometry.n_layers),
      Hkv(plan.geometry.n_kv_heads),
      Hq(plan.geometry.n_heads),
      G(plan.geometry.group),
      d(plan.geometry.head_dim),
      unfold(plan.geometry.unfold_gqa),
      Hs(plan.geometry.stored_heads),
      Gs(plan.geometry.stored_group),
      selector(make_layer_selector(options.selection.value_or(p.selection_device()))),
      device_reads(decide_device_reads(p, selector->device(), plan)),
      decoder_copies(d, G, unfold),
      decode_row_reads(decode_cache_row_reads(p.description(), device_reads.cached_row_signals())),
      prompt_row_reads(
          prompt_cache_row_reads(p.description(), device_reads.cached_row_signals(), PromptAnnouncement::BeforeTheCall)) {
  rope = Rope(c);
}

void EvictionEngine::State::reset() {
  report = EvictionReport{};
  report.policy = desc.name;
  report.budget = options.budget.text;
  report.selection = selector->device();
  in_prefill = prefill_done = false;
  prompt_had_placeholders = false;
  decode_step = appended = 0;
  sampling_seed = options.seed;
  layer_budget.assign(L, 0);
  layer_weight.assign(L, 1.0);
  head_plans.assign(L, {});
  head_budget.assign(L, {});
  scores.assign(L, std::vector<std::vector<float>>(Hs));
  selector->release_score_buffers();
  accumulated.assign(L, std::vector<std::vector<float>>());
  if (device_reads.accumulated_in_place) {
    if (!accumulated_device) accumulated_device = make_accumulated_attention_store(selector->device());
    accumulated_device->reset(L, Hs, Gs);
  }
  recent.reset(L, static_cast<size_t>(Hq) * d);
  original.clear();
  window_in.reset_counts();
  merge_state.reset(desc.merge, L, Hq);
  records.reset(L, desc.needs(TensorSignal::Token), desc.needs(TensorSignal::HiddenNorm),
                desc.needs(TensorSignal::HiddenState) ? config.dim : 0, hidden_states_read_in_their_call(desc));
  if (reads_query_statistics(desc))
    query_stats.reset(L, Hq, d, desc.needs(TensorSignal::QueryCovariance), desc.observe.query_stats_from);
}

EvictionEngine::EvictionEngine(const PolicyProgram& policy, const ModelConfig& config, EngineOptions options)
    : state_(std::make_unique<State>(policy, config, std::move(options))) {
  state_->reset();
}

EvictionEngine::~EvictionEngine() = default;

namespace {

// The decoder's device signals are memory of its GPU, and the program's kernels, its selector and
// its accumulated attention run on the program's: they must be the same device (the CLI and eval
// give both one --device; a library caller might not).
void refuse_signals_of_another_device(const PolicyProgram& p, const LayerSignals& signals) {
  const int scoring = p.cuda_device();
  if (signals.cuda_device < 0 || scoring < 0 || scoring == signals.cuda_device) return;
  throw UsageError("policy " + p.description().name + " scores on cuda:" + std::to_string(scoring) +
                   ", but the decoder runs on cuda:" + std::to_string(signals.cuda_device) +
                   ": score where the decoder runs (one device for both)");
}

}  // namespace

void EvictionEngine::after_layer(const LayerSignals& signals, KVCache& cache) {
  refuse_signals_of_another_device(state_->policy, signals);
  const bool new_prompt = signals.layer == 0 && (!state_->prefill_done || signals.first_position == 0);
  // An announced prompt must be what the next call starts (announce_prompt's contract).
  if (signals.layer == 0 && state_->announced && (!new_prompt || signals.first_position != 0)) {
    withdraw_announcement();
    throw std::logic_error("engine: a prompt was announced, but the decoder's next call continues at position " +
                           std::to_string(signals.first_position));
  }
  const bool prefill = new_prompt || state_->in_prefill;
  EngineCall timed(state_->clock, state_->report, /*decoding=*/!prefill);
  if (state_->replay_pending && signals.first_position > 0)
    throw UsageError("policy " + state_->desc.name +
                     " reads A_replay: its prompt must be prefilled by prefill_prompt "
                     "(core/engine/block_prefill.h), which runs the replay before any other forward call");
  // The decoder's window attention is valid during this call only: dropped however it ends.
  struct DropWindow {
    State& st;
    ~DropWindow() {
      st.window_in.drop();
      st.report.window_attention_reused = st.window_in.heads_copied();
      st.report.window_attention_in_place = st.window_in.heads_in_place();
      st.report.window_attention_downloads = st.window_in.downloads();
    }
  } drop_window{*state_};
  // Placeholder rows hold for this call only (the next may have synced them): forgotten however it ends.
  struct Rows {
    bool& placeholders;
    CachedRowMerges*& merges;
    ~Rows() {
      placeholders = false;
      merges = nullptr;
    }
  } rows{state_->placeholder_rows, state_->decoder_merges};
  rows.placeholders = signals.cache_rows_are_placeholders;
  rows.merges = signals.cache_rows_are_placeholders ? signals.cached_row_merges : nullptr;
  // The decoder's device copy of the cached rows and its positions, read in place by device
  // scoring: this call only.
  struct DeviceRows {
    State& st;
    ~DeviceRows() { st.decoder_copies.forget_all(); }
  } device_rows{*state_};
  if ((state_->device_reads.rows_in_place || state_->device_reads.norms_in_place) && signals.cache_rows.on_device) {
    state_->decoder_copies.hold_rows(signals.layer, signals.cache_rows);
  }
  if ((state_->device_reads.positions_in_place || state_->device_reads.positions_to_selector) && signals.cached_positions.on_device) {
    state_->decoder_copies.hold_positions(signals.layer, signals.cached_positions);
  }
  if (state_->device_reads.hidden_states_in_place && signals.hidden_states_on_device.on_device)
    state_->decoder_copies.hold_hidden_states(signals.layer, signals.first_position, signals.hidden_states_on_device);
  if (prefill)
    state_->prefill_layer(signals, cache, true);
  else
    state_->decode_layer(signals, cache);
}

void EvictionEngine::after_forward(int n_tokens, KVCache& cache) {
  (void)n_tokens;
  EngineCall timed(state_->clock, state_->report, /*decoding=*/!state_->in_prefill);
  if (state_->in_prefill) {
    if (state_->prompt_complete() && !state_->replay_pending) state_->finish_prefill(cache);
    return;
  }
  ++state_->decode_step;
  state_->report.decode_steps = state_->decode_step;
  state_->report.bytes_kept = cache.bytes_in_use();
  for (int l = 0; l < state_->L; ++l)
    for (int h = 0; h < cache.n_stored_heads(); ++h) state_->report_head(cache, l, h);
}

int EvictionEngine::prefill_block() const { return state_->plan.prefill.block; }

void EvictionEngine::begin_block_prefill(int prompt_len) {
  if (prompt_len <= 0) throw std::invalid_argument("begin_block_prefill: the prompt must have tokens");
  state_->block_prompt = prompt_len;  // the first block (position 0) starts the prompt as usual
}

void EvictionEngine::abandon_block_prefill() { state_->block_prompt = 0; }

void EvictionEngine::apply_after_prefill(const PrefillRecorder& recorded, KVCache& cache) {
  EngineCall timed(state_->clock, state_->report, /*decoding=*/false);
  State& st = *state_;
  if (static_cast<int>(recorded.layers().size()) != st.L)
    throw std::invalid_argument("apply_after_prefill: the recorder saw " + std::to_string(recorded.layers().size()) +
                                " layers, the model has " + std::to_string(st.L));
  const int S = recorded.first_position() + recorded.n_tokens();
  const std::vector<QueryStatisticsRequest>& statistics = recorded.statistics_requests();
  const bool statistics_served = query_statistics_serve(statistics, st.desc);
  const int need_window =
      recorded_window_for(st.policy, S, statistics, recorded.segment_requests(), recorded.tokens());
  const SegmentAttentionRequest segment = segment_attention_request_for(st.policy, S);
  if (st.desc.needs(TensorSignal::HiddenNorm) && !recorded.layers().empty() &&
      recorded.layers()[0].hidden_norms.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs hidden_norm; the recorder has none");
  if (st.desc.needs(TensorSignal::OutputNorm) && !recorded.layers().empty() &&
      recorded.layers()[0].output_grams.empty())
    throw std::invalid_argument(
        "apply_after_prefill: the policy needs out_norm; the recorder has no output projection");
  if (st.desc.needs(TensorSignal::OutputNormL1) && !recorded.layers().empty() &&
      recorded.layers()[0].output_projection.empty())
    throw std::invalid_argument(
        "apply_after_prefill: the policy needs out_norm_l1; the recorder has no output projection");
  if (st.desc.needs(TensorSignal::HiddenState) && !recorded.layers().empty() &&
      recorded.layers()[0].hidden_states.empty())
    throw std::invalid_argument("apply_after_prefill: the policy needs hidden; the recorder has no hidden states");
  for (int l = 0; l < st.L; ++l) {
    const PrefillRecorder::Layer& rec = recorded.layers()[l];
    const int window = std::min(need_window, recorded.n_tokens());
    if (rec.window < window)
      throw std::invalid_argument("apply_after_prefill: recorded window " + std::to_string(rec.window) +
                                  " is smaller than the policy's " + std::to_string(window));
    if (st.desc.needs(TensorSignal::AccumulatedAttention) && rec.accumulated_attention.empty())
      throw std::invalid_argument("apply_after_prefill: the policy needs accumulated attention; the recorder has none");
    LayerSignals s;
    s.layer = l;
    s.first_position = recorded.first_position();
    s.n_tokens = recorded.n_tokens();
    s.window = window;
    const size_t row = static_cast<size_t>(st.Hq) * st.d;
    s.window_queries = std::span<const float>(rec.window_queries.data() + (rec.window - window) * row, window * row);
    s.accumulated_attention = rec.accumulated_attention.empty() ? nullptr : &rec.accumulated_attention;
    s.tokens = recorded.tokens();
    s.hidden_norms = rec.hidden_norms;
    s.output_grams = rec.output_grams;
    s.output_projection = rec.output_projection;
    s.hidden_states = rec.hidden_states;
    // The recorded statistics, as this policy's accumulator keeps them (the means alone when it
    // reads no Q_cov: they do not depend on the covariance's sums).
    BlockQueryStatistics layer_statistics;
    if (statistics_served) {
      const BlockQueryStatistics* recorded_statistics = recorded.query_statistics(l, st.desc);
      if (!recorded_statistics)
        throw std::invalid_argument("apply_after_prefill: the recorder has no query statistics");
      layer_statistics = *recorded_statistics;
      if (!st.desc.needs(TensorSignal::QueryCovariance)) {
        layer_statistics.covariance = false;
        layer_statistics.m2.clear();
      }
      s.query_statistics = &layer_statistics;
    }
    // The recorded A_seg (null when not recorded: then every query was, and the engine makes it).
    if (segment.enabled()) s.segment_attention = recorded.segment_attention(l, segment);
    st.prefill_layer(s, cache, /*allow_cascading=*/false);
  }
  if (!st.replay_pending) return st.finish_prefill(cache);
  const ReplayScores* r = st.awaits_replay() ? recorded.replay(replay_options(st.desc.observe.replay)) : nullptr;
  if (!r && st.awaits_replay())
    throw std::invalid_argument(
        "apply_after_prefill: the policy reads A_replay; the recorder has no replay for its "
        "observe.replay (PrefillRecorder::record_replay)");
  st.complete_replay(r, cache);
}

bool EvictionEngine::awaits_replay() const { return state_->replay_pending; }

const std::vector<float>& EvictionEngine::finish_replay(Decoder& decoder, std::span<const int> prompt,
                                                        const std::vector<float>& logits) {
  State& st = *state_;
  if (!st.replay_pending) throw std::logic_error("finish_replay: no prefill waits for a replay");
  st.replay_logits = logits;  // the replay's forwards overwrite the decoder's logits buffer
  if (!st.awaits_replay()) {
    EngineCall timed(st.clock, st.report, /*decoding=*/false);
    st.complete_replay(nullptr, decoder.cache_for_keeps());
    return st.replay_logits;
  }
  ReplayScores scores;
  {
    Stopwatch sw(&st.report.replay_seconds);
    scores = run_policy_replay(decoder, prompt, st.desc.observe.replay);
  }
  EngineCall timed(st.clock, st.report, /*decoding=*/false);
  // Keeps only: the replay's scores are on the host, and a policy reading A_replay reads no row of
  // the prompt unless its prompt said so (then its rows are on the host already).
  st.complete_replay(&scores, decoder.cache_for_keeps());
  return st.replay_logits;
}

bool EvictionEngine::observes_decode() const { return state_->desc.run.decode_every > 0; }

const EvictionReport& EvictionEngine::report() const { return state_->report; }

const EvictionPlan& EvictionEngine::plan() const { return state_->plan; }

bool query_statistics_serve(const QueryStatisticsRequest& recorded, const PolicyDescription& d) {
  return recorded.enabled && reads_query_statistics(d) && recorded.from == d.observe.query_stats_from &&
         (recorded.covariance || !d.needs(TensorSignal::QueryCovariance));
}

bool query_statistics_serve(std::span<const QueryStatisticsRequest> recorded, const PolicyDescription& d) {
  return std::any_of(recorded.begin(), recorded.end(),
                     [&](const QueryStatisticsRequest& r) { return query_statistics_serve(r, d); });
}

SegmentAttentionRequest segment_attention_request_for(const PolicyProgram& policy, int prompt_len) {
  const PolicyObserve& o = policy.description().observe;
  if (o.segment <= 0) return {};
  return {o.segment, policy.window_for(prompt_len), o.causal, o.scaled};
}

int recorded_window_for(const PolicyProgram& policy, int prompt_len, std::span<const QueryStatisticsRequest> statistics,
                        std::span<const SegmentAttentionRequest> segments, std::span<const int> tokens) {
  const PolicyDescription& d = policy.description();
  // Every segment's last queries (unless its A_seg is recorded), the prompt query statistics
  // (unless recorded as statistics that serve the policy) and a window found from the tokens need
  // every query of the prompt.
  const SegmentAttentionRequest segment = segment_attention_request_for(policy, prompt_len);
  if (segment.enabled() && std::find(segments.begin(), segments.end(), segment) == segments.end()) return prompt_len;
  if (reads_query_statistics(d) && !query_statistics_serve(statistics, d)) return prompt_len;
  int window = policy.window_for(prompt_len);
  if (d.observe.window_after_token >= 0) {
    if (tokens.empty()) return prompt_len;
    try {
      window = window_from_tokens(d, tokens, window);
    } catch (const UsageError&) {
      return 0;  // the policy refuses this prompt (make_eviction_plan says so when it is applied)
    }
  }
  return std::max(window, d.needs(TensorSignal::CurrentAttention) ? 1 : 0);
}

std::vector<size_t> EvictionEngine::aligned_state_lengths(int layer, int stored_head) const {
  const State& st = *state_;
  std::vector<size_t> lengths;
  if (layer < 0 || layer >= st.L || stored_head < 0 || stored_head >= st.Hs) return lengths;
  if (!st.scores[layer][stored_head].empty()) lengths.push_back(st.scores[layer][stored_head].size());
  if (st.in_prefill)  // a prompt's scores held in the selector (a decode eviction's buffer is scratch)
    if (const std::vector<int64_t> held = st.selector->score_buffer_lengths(layer); !held.empty())
      lengths.push_back(static_cast<size_t>(held.at(static_cast<size_t>(stored_head))));
  if (st.accumulated_device)
    if (const int64_t n = st.accumulated_device->lengths(layer)[static_cast<size_t>(stored_head)]; n > 0)
      lengths.push_back(static_cast<size_t>(n));
  if (!st.accumulated[layer].empty())
    for (int g = 0; g < st.Gs; ++g)
      if (const auto& a = st.accumulated[layer][stored_head * st.Gs + g]; !a.empty()) lengths.push_back(a.size());
  return lengths;
}

}  // namespace kvevict
