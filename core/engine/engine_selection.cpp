// A layer's budgets and selections, and the cache edits that apply them (EvictionEngine::State,
// engine_state.h).
#include "core/engine/engine_state.h"

namespace kvevict {

int EvictionEngine::State::layer_shared_length(const KVCache& cache, int layer) const {
  const int T = cache.length(layer, 0);
  for (int h = 1; h < Hs; ++h)
    if (cache.length(layer, h) != T)
      throw std::logic_error("layer_shared selection: KV heads of layer " + std::to_string(layer) +
                             " differ in length");
  return T;
}

bool EvictionEngine::State::decode_scores_in_selector() const {
  return device_reads.scores_to_selector && plan.select.stages == 0 && !chunked_selection(desc.select) && !plan.select.threshold &&
         !options.trace_selection && !merge_reads_selection_scores(desc.merge);
}

bool EvictionEngine::State::prefill_scores_in_selector() const {
  return decode_scores_in_selector() && plan.prefill.evicts && !skip_prefill() && !unfold &&
         plan.select.scope != SelectScope::Model && !keeps_frozen_scores() &&
         plan.select.layer_allocation != LayerAllocation::Mass;
}

void EvictionEngine::State::evict_layer_scored_in_selector(KVCache& cache, int layer, int budget,
                                                           const ProtectedSet& pr, int step) {
  const std::vector<int64_t> lengths = stored_lengths(cache, layer);
  float* buffer = selector_buffer(layer, lengths);
  for (int h = 0; h < Hs; ++h) {
    const HeadSignals hs = signals_for(layer, h, cache, true);
    score_into_selector(layer, hs, lengths, h, buffer, plan.decode.own_score);
    ++report.scores_in_place;
  }
  sampling_seed = sampling_seed_for_step(options.seed, step);
  select_from_selector(cache, layer, budget, pr);
}

float* EvictionEngine::State::selector_buffer(int layer, const std::vector<int64_t>& lengths) {
  PhaseScope timed(clock, EnginePhase::Selection);
  return selector->layer_score_buffer(layer, lengths);
}

void EvictionEngine::State::score_into_selector(int layer, const HeadSignals& hs, const std::vector<int64_t>& lengths,
                                                int h, float* buffer, bool decoding) {
  if (hs.in.T != lengths[h])
    throw std::logic_error("engine: head " + std::to_string(h) + " of layer " + std::to_string(layer) + " scored " +
                           std::to_string(hs.in.T) + " entries of " + std::to_string(lengths[h]));
  PhaseScope timed(clock, EnginePhase::Scoring);
  if (reads_rows_in_place(hs.in)) ++report.cache_rows_in_place;
  policy.score_on_device(hs.in, decoding, buffer + layer_score_offset(lengths, static_cast<size_t>(h)));
}

void EvictionEngine::State::select_from_selector(KVCache& cache, int layer, int budget, const ProtectedSet& pr) {
  const std::vector<int64_t> lengths = stored_lengths(cache, layer);
  PhaseScope timed(clock, EnginePhase::Selection);
  // The positions where the decoder's device cache holds them, when it handed them over in this call.
  const CachedPositionsSignal* held = device_reads.positions_to_selector ? decoder_copies.positions_for_selection(layer, lengths, original.active()) : nullptr;
  auto counted = [&](auto kept) {  // a selection that read them, once it has
    if (held) ++report.selection_positions_in_place;
    return kept;
  };
  if (plan.select.scope == SelectScope::Layer) {
    std::vector<std::span<const int32_t>> pos(Hs);
    for (int h = 0; h < Hs; ++h)
      pos[h] = std::span<const int32_t>(positions(cache, layer, h), static_cast<size_t>(lengths[h]));
    ++report.layer_selections;
    keep_layer(cache, layer,
               counted(selector->select_layer_adaptive_from_buffer(layer, pos, std::vector<int>(Hs, budget), pr.first,
                                                                   pr.recent, plan.select.floor_alpha,
                                                                   plan.select.kept_order == KeptOrder::Score, held)),
               std::vector<std::span<const float>>(Hs));
    return;
  }
  if (plan.select.scope == SelectScope::LayerShared) {  // one decision on the heads' mean (evict_layer)
    const int T = layer_shared_length(cache, layer);
    ++report.layer_selections;
    const std::vector<int> kept = counted(selector->select_layer_shared_from_buffer(
        layer, Hs, std::span<const int32_t>(positions(cache, layer, 0), static_cast<size_t>(T)),
        spec_for(layer, 0, budget, pr), held));
    keep_layer(cache, layer, std::vector<std::vector<int>>(Hs, kept), std::vector<std::span<const float>>(Hs));
    return;
  }
  const std::vector<int> budgets = head_budgets(cache, layer, budget, pr);
  if (desc.has_head_plan) head_budget[layer] = budgets;
  std::vector<std::span<const int32_t>> pos(Hs);
  std::vector<HeadSelectionSpec> specs;
  for (int h = 0; h < Hs; ++h) {
    pos[h] = std::span<const int32_t>(positions(cache, layer, h), static_cast<size_t>(lengths[h]));
    specs.push_back(spec_for(layer, h, budgets[h], pr));
  }
  ++report.layer_selections;
  keep_layer(cache, layer, counted(selector->select_heads_from_buffer(layer, pos, specs, held)),
             std::vector<std::span<const float>>(Hs));
}

void EvictionEngine::State::score_layer_into_selector(int layer, const std::vector<HeadSignals>& heads,
                                                      const KVCache& cache) {
  const std::vector<int64_t> lengths = stored_lengths(cache, layer);
  float* buffer = selector_buffer(layer, lengths);
  for (int h = 0; h < Hs; ++h) {
    std::vector<float>().swap(scores[layer][h]);
    score_into_selector(layer, heads[h], lengths, h, buffer, false);
    ++report.prefill_scores_in_place;
  }
}

std::vector<int64_t> EvictionEngine::State::split(int last, int64_t stage_total, const KVCache& cache) const {
  std::vector<double> w(last + 1);
  std::vector<int64_t> lo(last + 1), hi(last + 1);
  for (int k = 0; k <= last; ++k) {
    w[k] = desc.has_layer_weight ? layer_weight[k] : 1.0;
    hi[k] = cache.length(k, 0);
    for (int h = 1; h < cache.n_stored_heads(); ++h) hi[k] = std::min<int64_t>(hi[k], cache.length(k, h));
    lo[k] = plan.budget.protected_floor;
  }
  return allocate_budgets(w, lo, hi, stage_total);
}

std::vector<int64_t> EvictionEngine::State::layer_budgets(int last, int64_t stage_total, const KVCache& cache) const {
  if (plan.static_layer_budgets() && last == L - 1 && stage_total == plan.budget.total && holds_whole_prompt(cache))
    return std::vector<int64_t>(plan.budget.layer.begin(), plan.budget.layer.end());
  if (plan.select.layer_allocation == LayerAllocation::Share) return split(last, stage_total, cache);
  const double cap = plan.budget.tokens_per_head;
  std::vector<int64_t> out(last + 1);
  for (int k = 0; k <= last; ++k) {
    int64_t held = cache.length(k, 0);
    for (int h = 1; h < cache.n_stored_heads(); ++h) held = std::min<int64_t>(held, cache.length(k, h));
    const double own =
        plan.select.layer_allocation == LayerAllocation::Mass ? mass_layer_budget(k, cache) : layer_weight[k];
    const double want = std::min({own, cap, static_cast<double>(held)});
    out[k] = std::max<int64_t>(plan.budget.protected_floor, std::llround(std::max(0.0, want)));
  }
  return out;
}

double EvictionEngine::State::mass_layer_budget(int layer, const KVCache& cache) const {
  double sum = 0;
  for (int h = 0; h < Hs; ++h) {
    const int T = cache.length(layer, cache_head(h, cache));
    sum += mass_count(std::span<const float>(scores[layer][h].data(), T),
                      std::span<const int32_t>(positions(cache, layer, cache_head(h, cache)), T), plan.protect.first,
                      plan.protect.recent, plan.select.mass);
  }
  return plan.budget.protected_floor + std::ceil(sum / Hs);
}

void EvictionEngine::State::keep_layer(KVCache& cache, int layer, const std::vector<std::vector<int>>& kept,
                                       const std::vector<std::span<const float>>& scores) {
  PhaseScope timed(clock, EnginePhase::CacheEdit);
  if (plan.stages.merge_per_layer) merge_state.merge_layer(desc.merge, cache, layer, kept, merge_rows(layer));
  for (int h = 0; h < Hs; ++h) keep(cache, layer, h, kept[h], scores[h]);
  // The prompt's scores held in the selector follow the cache when a later cascading stage selects
  // the layer again; after the layer's last selection of the prompt they are given back.
  if (in_prefill && prefill_scores_in_selector()) {
    if (held_scores_selected_again) {
      selector->keep_in_buffer(layer, kept);
    } else {
      selector->release_score_buffer(layer);
    }
  }
}

CachedRowMerges* EvictionEngine::State::merge_rows(int layer) const {
  if (!placeholder_rows) return nullptr;
  if (!decoder_merges) refuse_placeholder_read(layer, "the cached rows (a merge the decoder did not offer)");
  return decoder_merges;
}

void EvictionEngine::State::keep(KVCache& cache, int layer, int kv_head, const std::vector<int>& kept,
                                 std::span<const float> scores) {
  PhaseScope timed(clock, EnginePhase::CacheEdit);
  const size_t length = cache.length(layer, kv_head);
  const KeptListShape shape = kept_list_shape(kept);  // one scan, for this test and the aligned state
  // Every entry kept where it is (a threshold rule whose every candidate passed, a selection
  // within budget): the cache, its device mirror (a compaction call, O(T) host planning per head)
  // and what is aligned with it stay as they are. Not with a merge, which may act on a keep itself.
  if (!plan.stages.merge_on_evict && kept.size() == length && shape.in_place == length) {
    ++report.unchanged_keeps;
    return;
  }
  if (plan.stages.merge_on_evict && !plan.stages.merge_per_layer)  // folds the evicted in first
    merge_on_evict(desc.merge, cache, layer, kv_head, kept,
                   merge_state.context(layer, kv_head, Gs, static_cast<int>(length), scores, sampling_seed,
                                       std::span<const int32_t>(positions(cache, layer, kv_head), length)),
                   merge_rows(layer));
  window_in.drop_layer(layer);  // the decoder's window attention no longer matches the layer
  decoder_copies.forget(layer);    // nor its copy of the rows, nor its positions' description
  cache.keep(layer, kv_head, kept);
  permute_aligned(layer, kv_head, kept, shape, length);
  original.kept(layer, kv_head, kept);
}

void EvictionEngine::State::permute_aligned(int layer, int kv_head, const std::vector<int>& kept,
                                            const KeptListShape& shape, size_t length) {
  // `kept` was checked by the cache's keep: as there, the in-place prefix stays and an ascending
  // list moves the rest front to back (a decode step's eviction near the newest entries: O(moved)).
  auto permute = [&](std::vector<float>& v) {
    if (v.empty()) return;
    if (v.size() != length)
      throw std::logic_error("engine: per-entry state of layer " + std::to_string(layer) + " head " +
                             std::to_string(kv_head) + " holds " + std::to_string(v.size()) + " entries, the cache " +
                             std::to_string(length));
    if (shape.ascending) {
      for (size_t i = shape.in_place; i < kept.size(); ++i) v[i] = v[static_cast<size_t>(kept[i])];
      v.resize(kept.size());
      return;
    }
    std::vector<float> next(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) next[i] = v[kept[i]];
    v.swap(next);
  };
  permute(scores[layer][kv_head]);
  if (device_reads.accumulated_in_place) accumulated_device->keep(layer, kv_head, kept, static_cast<int64_t>(length));
  if (!accumulated[layer].empty())
    for (int g = 0; g < Gs; ++g) permute(accumulated[layer][kv_head * Gs + g]);
  merge_state.kept(layer, kv_head, Gs, kept, length);
}

void EvictionEngine::State::trace_selection(int layer, int head, std::span<const float> sc,
                                            std::span<const int32_t> pos, bool layer_wide) const {
  if (traces.size() != static_cast<size_t>(L)) traces.assign(L, {});
  auto& row = traces[layer];
  if (row.size() <= static_cast<size_t>(head)) row.resize(static_cast<size_t>(head) + 1);
  row[head].scores.assign(sc.begin(), sc.end());
  row[head].positions.assign(pos.begin(), pos.end());
  row[head].layer_wide = layer_wide;
}

void EvictionEngine::State::copy_trace(int layer, int head, HeadReport& r) const {
  if (static_cast<size_t>(layer) >= traces.size() || static_cast<size_t>(head) >= traces[layer].size()) return;
  r.selection_scores = traces[layer][head].scores;
  r.selection_positions = traces[layer][head].positions;
  r.selection_layer_wide = traces[layer][head].layer_wide;
}

HeadSelectionSpec EvictionEngine::State::spec_for(int layer, int kv_head, int budget, const ProtectedSet& pr) const {
  HeadSelectionSpec s;
  s.budget = budget;
  s.protect_first = pr.first;
  s.protect_recent = pr.recent;
  s.random_share = plan.select.random_share;
  s.temperature = plan.select.temperature;
  s.score_order = plan.select.kept_order == KeptOrder::Score;
  s.seed = sampling_seed;
  s.layer = layer;
  s.kv_head = kv_head;
  return s;
}

std::vector<std::vector<int>> EvictionEngine::State::select_layer_entries(
    const std::vector<std::span<const float>>& sc, const std::vector<std::span<const int32_t>>& pos, int layer,
    const std::vector<int>& head, const std::vector<int>& budget, const ProtectedSet& pr) {
  PhaseScope timed(clock, EnginePhase::Selection);
  const size_t n = sc.size();
  if (options.trace_selection)
    for (size_t i = 0; i < n; ++i) trace_selection(layer, head[i], sc[i], pos[i]);
  std::vector<std::vector<int>> kept(n);
  if (chunked_selection(desc.select)) {
    for (size_t i = 0; i < n; ++i) kept[i] = select_chunked(sc[i], pos[i], desc.select, budget[i], pr.first, pr.recent);
    return kept;
  }
  std::vector<HeadSelectionSpec> specs;
  for (size_t i = 0; i < n; ++i) {
    int b = budget[i];
    if (plan.select.threshold)  // --budget full turns it off
      b = threshold_budget(sc[i], pos[i], b, pr.first, pr.recent, plan.select.threshold_value);
    specs.push_back(spec_for(layer, head[i], b, pr));
  }
  ++report.layer_selections;
  return selector->select_heads(sc, pos, specs);
}

std::vector<int> EvictionEngine::State::select_entries(std::span<const float> sc, std::span<const int32_t> pos,
                                                       int layer, int head, int budget, const ProtectedSet& pr) {
  return std::move(select_layer_entries({sc}, {pos}, layer, {head}, {budget}, pr).front());
}

std::vector<int> EvictionEngine::State::head_budgets(const KVCache& cache, int layer, int budget,
                                                     const ProtectedSet& pr) const {
  if (!desc.has_head_plan || static_cast<int>(head_plans[layer].size()) != Hs) return std::vector<int>(Hs, budget);
  std::vector<int> length(Hs);
  for (int h = 0; h < Hs; ++h) length[h] = static_cast<int>(cache.length(layer, h));
  return split_head_budgets(budget, head_plans[layer], length, pr.first + pr.recent, plan.select.head_allocation);
}

void EvictionEngine::State::evict_layer(KVCache& cache, int layer, int budget,
                                        const std::vector<std::vector<float>>& head_scores, const ProtectedSet& pr) {
  PhaseScope timed(clock, EnginePhase::Selection);  // the keeps, and a staged rule's signals and scores, pause it
  if (plan.select.stages > 0) {
    // A prompt's scores are the file's `score` (score(hs, false)) over the cache as it is; a decode
    // step's may be its decode_score's.
    evict_staged(cache, layer, budget, pr, in_prefill ? &head_scores : nullptr);
  } else if (plan.select.scope == SelectScope::Layer) {
    std::vector<std::span<const float>> sc;
    std::vector<std::span<const int32_t>> pos;
    for (int h = 0; h < Hs; ++h) {
      sc.emplace_back(head_scores[h].data(), head_scores[h].size());
      pos.emplace_back(positions(cache, layer, h), cache.length(layer, h));
    }
    if (options.trace_selection)  // one joint ranking over the layer's heads
      for (int h = 0; h < Hs; ++h) trace_selection(layer, h, sc[h], pos[h], true);
    ++report.layer_selections;
    const auto kept =
        selector->select_layer_adaptive(sc, pos, std::vector<int>(Hs, budget), pr.first, pr.recent,
                                        plan.select.floor_alpha, plan.select.kept_order == KeptOrder::Score);
    keep_layer(cache, layer, kept, sc);
  } else if (plan.select.scope == SelectScope::LayerShared) {
    // TOVA (spec §5.3): one decision per layer on the mean of the KV heads' scores. Every head
    // has kept the same positions in the same order so far, so one index list fits all.
    const int T = layer_shared_length(cache, layer);
    std::vector<float> packed(static_cast<size_t>(Hs) * T), mean(T);
    for (int h = 0; h < Hs; ++h) std::copy_n(head_scores[h].data(), T, packed.data() + static_cast<size_t>(h) * T);
    for (int t = 0; t < T; ++t) mean[t] = layer_shared_mean_element(packed.data(), Hs, T, t);
    const auto kept = select_entries(std::span<const float>(mean.data(), T),
                                     std::span<const int32_t>(positions(cache, layer, 0), T), layer, 0, budget, pr);
    if (options.trace_selection)  // every head was selected on the mean (head 0 traced above)
      for (int h = 1; h < Hs; ++h)
        trace_selection(layer, h, mean, std::span<const int32_t>(positions(cache, layer, h), T));
    keep_layer(cache, layer, std::vector<std::vector<int>>(Hs, kept),
               std::vector<std::span<const float>>(Hs, std::span<const float>(mean)));
  } else {
    const std::vector<int> budgets = head_budgets(cache, layer, budget, pr);
    if (desc.has_head_plan) head_budget[layer] = budgets;
    std::vector<std::span<const float>> sc(Hs);
    std::vector<std::span<const int32_t>> pos(Hs);
    std::vector<int> heads(Hs);
    for (int h = 0; h < Hs; ++h) {
      const int T = cache.length(layer, h);
      sc[h] = std::span<const float>(head_scores[h].data(), T);
      pos[h] = std::span<const int32_t>(positions(cache, layer, h), T);
      heads[h] = h;
    }
    keep_layer(cache, layer, select_layer_entries(sc, pos, layer, heads, budgets, pr), sc);
  }
}

void EvictionEngine::State::evict_staged(KVCache& cache, int layer, int budget, const ProtectedSet& pr,
                                         const std::vector<std::vector<float>>* first_stage) {
  const size_t n = desc.select.stages.size();
  if (plan.select.stage_shares) {  // shares of one budget, all scored on the same cache
    std::vector<double> shares;
    for (const PolicySelect::Stage& stage : desc.select.stages) shares.push_back(stage.share);
    for (int h = 0; h < Hs; ++h) {
      const HeadSignals hs = signals_for(layer, h, cache, false);
      std::vector<std::vector<float>> sc(n, std::vector<float>(hs.in.T, 0.0f));
      std::vector<std::span<const float>> spans;
      for (size_t i = 0; i < n; ++i) {
        {
          PhaseScope timed(clock, EnginePhase::Scoring);
          policy.stage_score(desc.select.stages[i].program, hs.in, sc[i].data());
        }
        spans.emplace_back(sc[i]);
      }
      keep(cache, layer, h,
           select_shares(spans, std::span<const int32_t>(positions(cache, layer, h), hs.in.T), shares, budget, pr.first,
                         pr.recent, plan.select.kept_order == KeptOrder::Score),
           spans.front());
    }
    return;
  }
  for (size_t i = 0; i < n; ++i)
    for (int h = 0; h < Hs; ++h) {
      const PolicySelect::Stage& stage = desc.select.stages[i];
      const int T = cache.length(layer, h);
      std::vector<float> sc;
      if (i == 0 && stage.program == 0 && first_stage && static_cast<size_t>(h) < first_stage->size() &&
          (*first_stage)[h].size() == static_cast<size_t>(T)) {
        sc = (*first_stage)[h];  // made at the layer's turn, where the decoder's window attention was
      } else {
        // A later stage reads what its program reads, of the head the earlier stages cut.
        const HeadSignals hs = signals_for(layer, h, cache, false, i > 0 && stage.reads_known ? &stage.reads : nullptr);
        sc.assign(hs.in.T, 0.0f);
        PhaseScope timed(clock, EnginePhase::Scoring);
        policy.stage_score(stage.program, hs.in, sc.data());
      }
      const int k = stage_keep_count(T, stage.keep, budget, i + 1 == n);
      keep(cache, layer, h,
           select_entries(sc, std::span<const int32_t>(positions(cache, layer, h), T), layer, h, k, pr), sc);
    }
}

void EvictionEngine::State::evict_model(KVCache& cache) {
  PhaseScope timed(clock, EnginePhase::Selection);  // keep_layer pauses it
  std::vector<std::vector<std::span<const float>>> sc(L);
  std::vector<std::vector<std::span<const int32_t>>> pos(L);
  for (int k = 0; k < L; ++k)
    for (int h = 0; h < Hs; ++h) {
      sc[k].emplace_back(scores[k][h].data(), scores[k][h].size());
      pos[k].emplace_back(positions(cache, k, h), cache.length(k, h));
    }
  const auto kept = select_model_wide(sc, pos, layer_budget, plan.protect.first, plan.protect.recent,
                                      plan.select.kept_order == KeptOrder::Score);
  for (int k = 0; k < L; ++k) keep_layer(cache, k, kept[k], sc[k]);
}

}  // namespace kvevict
