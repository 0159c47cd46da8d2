// Decode steps (EvictionEngine::State, engine_state.h): the trigger, the budget and the eviction.
#include "core/engine/engine_state.h"

namespace kvevict {

void EvictionEngine::State::score_new_entries(int layer, const KVCache& cache, int added) {
  for (int h = 0; h < Hs; ++h) {
    std::vector<float>& frozen = scores[layer][h];
    const int T = cache.length(layer, h);
    if (static_cast<int>(frozen.size()) + added != T)
      throw std::logic_error("engine: frozen scores of layer " + std::to_string(layer) + " head " + std::to_string(h) +
                             " hold " + std::to_string(frozen.size()) + " entries, the cache " + std::to_string(T) +
                             " after " + std::to_string(added) + " new");
    if (added <= 0) continue;
    if (desc.decode_scores_each_entry_alone) {  // the new entries alone: their values over the whole head
      const std::vector<float> now = score(signals_for(layer, h, cache, true, &desc.decode_reads, T - added), true);
      frozen.insert(frozen.end(), now.begin(), now.end());
      ++report.new_entries_scored_alone;
      continue;
    }
    const std::vector<float> now = score(signals_for(layer, h, cache, true), true);
    frozen.insert(frozen.end(), now.end() - added, now.end());
  }
}

int EvictionEngine::State::decode_budget(int l) const {
  if (!plan.decode.has_budget) return layer_budget[l];
  const double b0 = plan.budget.tokens_per_head;
  const double b = policy.decode_budget_for(plan.prompt_len, appended, b0);
  if (!(b >= 0 && b <= 1e9))
    throw UsageError("policy " + desc.name + ": run.decode_budget is " + std::to_string(b) + " after " +
                     std::to_string(appended) + " generated tokens (prompt of " + std::to_string(plan.prompt_len) +
                     " tokens); a budget must be a number of tokens in 0..10^9");
  const double scaled = desc.has_layer_weight && b0 > 0 ? layer_budget[l] * (b / b0) : b;
  return static_cast<int>(std::floor(scaled + 0.5));
}

int EvictionEngine::State::decode_budget_if_over(const KVCache& cache, int l) {
  PhaseScope timed(clock, EnginePhase::Selection);
  const int budget = decode_budget(l);
  bool over = plan.select.threshold;
  const std::vector<int> budgets = head_budgets(cache, l, budget, plan.decode.protect);
  for (int h = 0; h < Hs; ++h) over |= cache.length(l, h) > budgets[h] + plan.decode.slack;
  return over ? budget : -1;
}

void EvictionEngine::State::decode_layer(const LayerSignals& s, KVCache& cache) {
  const int l = s.layer;
  // Placeholder rows on the host: A_now is the decoder's row (a one-token block's column sums).
  const bool from_decoder = s.cache_rows_are_placeholders && s.n_tokens == 1 && !unfold;
  decoder_current_attention = from_decoder ? s.accumulated_attention : nullptr;
  decoder_current_device = from_decoder ? s.column_sums_on_device : ColumnSumsSignal{};
  struct Forget {
    State& st;
    ~Forget() {
      st.decoder_current_attention = nullptr;
      st.decoder_current_device = {};
      st.current_host.clear();
    }
  } forget{*this};
  original.appended(l, cache, s.first_position);
  record_layer_signals(s, cache, /*decoding=*/true);
  const int step = decode_step + 1;
  if (l == 0) appended += s.n_tokens;
  const bool frozen = keeps_frozen_scores();
  if (frozen) score_new_entries(l, cache, s.n_tokens);  // every step, trigger or not: at its own step
  if (plan.decode.every <= 0 || step % plan.decode.every != 0) return;
  const int budget = decode_budget_if_over(cache, l);
  if (budget < 0) return;
  if (!frozen && decode_scores_in_selector()) {
    evict_layer_scored_in_selector(cache, l, budget, plan.decode.protect, step);
  } else if (frozen && threshold_steps_from_window()) {
    evict_threshold_layer(cache, l, budget);
  } else {
    std::vector<std::vector<float>> sc(Hs);
    for (int h = 0; h < Hs; ++h) sc[h] = frozen ? scores[l][h] : score(signals_for(l, h, cache, true), true);
    sampling_seed = sampling_seed_for_step(options.seed, step);
    evict_layer(cache, l, budget, sc, plan.decode.protect);  // PrefillDecodingPress: the second press's own set
  }
  PhaseScope timed(clock, EnginePhase::CacheEdit);
  merge_state.evicted(l);
  if (plan.stages.reassign_positions) OriginalPositions::reassign_layer(cache, l);
  ++report.applications;
}

bool EvictionEngine::State::threshold_steps_from_window() const {
  const PlanSelection& sel = plan.select;
  return sel.threshold && sel.frozen_scores && sel.scope == SelectScope::KvHead && sel.unit == SelectUnit::Token &&
         sel.kept_order == KeptOrder::Positional && sel.stages == 0 && sel.random_share == 0 && !unfold &&
         !plan.stages.merge_on_evict && !plan.stages.reassign_positions && !options.trace_selection;
}

void EvictionEngine::State::evict_threshold_layer(KVCache& cache, int l, int budget) {
  const ProtectedSet& pr = plan.decode.protect;
  const double threshold = plan.select.threshold_value;
  if (threshold_records.size() != static_cast<size_t>(L)) threshold_records.assign(L, {});
  std::vector<ThresholdWindowRecord>& records = threshold_records[l];
  if (records.size() != static_cast<size_t>(Hs)) records.assign(Hs, {});
  auto head_scores = [&](int h) { return std::span<const float>(scores[l][h].data(), scores[l][h].size()); };
  auto head_positions = [&](int h) {
    return std::span<const int32_t>(positions(cache, l, h), static_cast<size_t>(cache.length(l, h)));
  };
  std::vector<int> budgets;
  std::vector<std::vector<int>> evicted(Hs);
  bool from_window = true;
  {
    PhaseScope timed(clock, EnginePhase::Selection);
    budgets = head_budgets(cache, l, budget, pr);
    for (int h = 0; h < Hs && from_window; ++h) {
      std::optional<std::vector<int>> step = threshold_window_step(
          head_scores(h), head_positions(h), cache.edit_stamp(l, h), records[h], pr.first, pr.recent, threshold, budgets[h]);
      from_window = step.has_value();
      if (step) evicted[h] = std::move(*step);
    }
  }
  if (from_window) {
    PhaseScope timed(clock, EnginePhase::CacheEdit);  // the kept lists too
    if (desc.has_head_plan) head_budget[l] = budgets;
    for (int h = 0; h < Hs; ++h) {
      if (evicted[h].empty()) {
        ++report.unchanged_keeps;  // as keep() counts a list that keeps every entry in place
      } else {
        keep(cache, l, h, kept_without(cache.length(l, h), evicted[h]), head_scores(h));
      }
      records[h].stamp = cache.edit_stamp(l, h);
    }
    report.threshold_window_steps += Hs;
    return;
  }
  // Some head's record did not apply: the full rule for the layer, then every head checked afresh.
  std::vector<std::vector<float>> sc(Hs);
  for (int h = 0; h < Hs; ++h) sc[h] = scores[l][h];
  evict_layer(cache, l, budget, sc, pr);
  PhaseScope timed(clock, EnginePhase::Selection);
  for (int h = 0; h < Hs; ++h)
    records[h] = verify_threshold_head(head_scores(h), head_positions(h), cache.edit_stamp(l, h), pr.first, pr.recent,
                                       threshold)
                     .value_or(ThresholdWindowRecord{});
}

}  // namespace kvevict
