// The prompt (EvictionEngine::State, engine_state.h): its scores, cascading evictions, and the end
// of the prefill (replay, key channels, codebook, report).
#include "core/engine/engine_state.h"

namespace kvevict {

void EvictionEngine::State::score_layer_at_prefill(int layer, const KVCache& cache) {
  // The W x T window products dominate; heads are independent. Scores stay serial (a policy
  // program need not be thread-safe).
  std::vector<HeadSignals> heads(Hs);
  // The heads' window attention side by side in one buffer, so that a layer-level program
  // (CAKE's layer weight) reads them in place instead of copying them together.
  const int T = cache.length(layer, cache_head(0, cache));
  bool same_length = !desc.observe.same_index_head;  // same_index_head gives one head, not G
  for (int h = 1; h < Hs; ++h) same_length = same_length && cache.length(layer, cache_head(h, cache)) == T;
  // Every head scored from the decoder's device buffer in place: nothing to download or gather.
  const WindowRows wr = window_rows(layer);
  const bool in_place =
      device_reads.window_in_place && !unfold && wr.W > 0 && window_in.in_place_for_every_head(layer, wr.W, wr.first);
  same_length = same_length && !in_place;
  const size_t per_head = static_cast<size_t>(Gs) * std::min(plan.window, recent.rows(layer)) * T;
  std::vector<float> layer_window_attention(same_length ? per_head * Hs : 0);  // [Hs][Gs][W][T]
  // hidden[c, t] once for the layer where every head reads the same (dropped once the layer is scored).
  struct DropLayerHidden {
    LayerHiddenStates& h;
    ~DropLayerHidden() {
      h.layer = -1;
      std::vector<float>().swap(h.data);
    }
  } drop_layer_hidden{layer_hidden};
  {
    PhaseScope timed(clock, EnginePhase::Signals);  // the loop as a whole: no timing on worker threads
    share_layer_hidden_states(layer, cache);
    if (!in_place) window_in.fetch();               // a device buffer comes down here, not on a worker thread
    // An exception must not leave an OpenMP region (std::terminate): the first is kept and
    // rethrown after the loop (refuse_placeholder_read, a decoder's signal of the wrong shape).
    std::exception_ptr failed;
    std::mutex failed_mutex;
    // A_acc's pending rebuild (a device launch) runs here, on the thread whose device is current,
    // not on a worker: the workers' head() calls then only read.
    if (device_reads.accumulated_in_place && Hs > 0) accumulated_device->head(layer, stored_lengths(cache, layer), 0);
#pragma omp parallel for schedule(static) if (Hs > 1 && cache.length(layer, 0) * plan.window > 65536)
    for (int h = 0; h < Hs; ++h) {
      try {
        heads[h] = gather_signals(layer, h, cache, false,
                                  same_length ? layer_window_attention.data() + per_head * h : nullptr);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failed_mutex);
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
  }
  if (prefill_scores_in_selector()) {
    score_layer_into_selector(layer, heads, cache);
  } else {
    for (int h = 0; h < Hs; ++h) scores[layer][h] = score(heads[h], false);
  }
  PhaseScope timed(clock, EnginePhase::Scoring);  // the head plans and the layer weight
  if (desc.has_head_plan) {
    head_plans[layer].clear();
    for (int h = 0; h < Hs; ++h)
      head_plans[layer].push_back(policy.head_plan(desc.head_plan_reads_signals() ? heads[h].in : scalars_of(heads[h].in)));
  }
  if (desc.has_layer_weight) {
    LayerWeightInputs lw;
    lw.layer = layer;
    lw.n_layers = L;
    lw.prompt_len = plan.prompt_len;
    lw.budget = plan.budget.tokens_per_head;
    for (auto& h : heads) lw.heads.push_back(h.in);
    layer_weight[layer] = policy.layer_weight(lw);
  }
}

void EvictionEngine::State::take_announced_plan(const LayerSignals& s, int prompt_len) {
  EvictionPlan next = std::move(*announced);
  announced.reset();
  std::vector<int> tokens;
  tokens.swap(announced_tokens);
  // The announcement must be this prompt's: its length, and its first tokens those of the call (all
  // of them in one call; a first block's own in blocks, the announced plan made from all of them).
  if (next.prompt_len != prompt_len)
    throw std::logic_error("engine: a prompt of " + std::to_string(next.prompt_len) +
                           " tokens was announced, the decoder started one of " + std::to_string(prompt_len));
  if (s.tokens.size() > tokens.size() || !std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin()))
    throw std::logic_error("engine: the prompt announced is not the one the decoder started");
  plan = std::move(next);
}

bool EvictionEngine::State::holds_whole_prompt(const KVCache& cache) const {
  for (int k = 0; k < L; ++k)
    for (int h = 0; h < cache.n_stored_heads(); ++h)
      if (cache.length(k, h) != plan.prompt_len) return false;
  return true;
}

void EvictionEngine::State::prefill_layer(const LayerSignals& s, KVCache& cache, bool allow_cascading) {
  const int l = s.layer;
  const bool later_block = block_prompt > 0 && s.first_position > 0;  // the prompt's state carries on
  if (l == 0 && !later_block) {
    reset();
    in_prefill = true;
    const int prompt_len = block_prompt > 0 ? block_prompt : s.first_position + s.n_tokens;
    if (desc.observe.window_after_token >= 0 && static_cast<int>(s.tokens.size()) != s.n_tokens)
      throw std::logic_error("engine: the decoder did not hand over the prompt's tokens");
    plan_announced = announced.has_value();
    if (announced) {
      take_announced_plan(s, prompt_len);
    } else {
      plan = make_eviction_plan(policy, plan.geometry, options.budget, prompt_len, s.tokens);
    }
    if (desc.observe.segment > 0)
      segments.reset(L, desc.observe.segment, plan.window, prompt_len, static_cast<size_t>(Hq) * d);
    report.prompt_len = prompt_len;
    report.bytes_full = cache.bytes_for_uniform_length(prompt_len);
  }
  if (l == 0) prefill_seen = s.first_position + s.n_tokens;
  prompt_had_placeholders = prompt_had_placeholders || s.cache_rows_are_placeholders;
  if (prefill_seen > plan.prompt_len)
    throw UsageError("policy " + desc.name + ": the prefill in blocks received " + std::to_string(prefill_seen) +
                     " tokens for a prompt of " + std::to_string(plan.prompt_len));
  record_layer_signals(s, cache, /*decoding=*/false);
  if (l == 0 && !later_block) replay_pending = reads_replay(desc);
  if (replay_pending) {
    hold_output_projection(s);
    report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
    return;
  }
  evaluate_layer(l, cache, allow_cascading);
}

void EvictionEngine::State::evaluate_layer(int l, KVCache& cache, bool allow_cascading) {
  score_layer_at_prefill(l, cache);
  report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
  if (!plan.prefill.evicts || skip_prefill()) return;
  const bool cascading = allow_cascading && plan.prefill.cascading;
  if (!cascading && l != L - 1) return;
  // Layers not seen yet keep their floors out of the stage total (CAKE splits B_total over the
  // seen layers; each layer also keeps its window), so the last stage splits exactly the total.
  const int64_t stage_total = plan.budget.total - static_cast<int64_t>(L - 1 - l) * plan.budget.protected_floor;
  {
    PhaseScope timed(clock, EnginePhase::Selection);
    const auto budgets = layer_budgets(l, stage_total, cache);
    for (int k = 0; k <= l; ++k) layer_budget[k] = static_cast<int>(budgets[k]);
  }
  held_scores_selected_again = cascading && l < L - 1;
  if (unfold) {
    unfold_and_evict(cache);
  } else if (plan.select.scope == SelectScope::Model) {
    evict_model(cache);
  } else {
    for (int k = 0; k <= l; ++k) {
      if (prefill_scores_in_selector()) {
        select_from_selector(cache, k, layer_budget[k], plan.protect);
      } else {
        evict_layer(cache, k, layer_budget[k], scores[k], plan.protect);
      }
    }
  }
  report.prefill_evicted = true;
  ++report.applications;
}

void EvictionEngine::State::unfold_and_evict(KVCache& cache) {
  std::vector<std::vector<std::vector<int>>> kept(L);
  PhaseScope selecting(clock, EnginePhase::Selection);  // the edit below pauses it
  for (int k = 0; k < L; ++k) {
    std::vector<std::span<const float>> sc(Hs);
    std::vector<std::span<const int32_t>> pos(Hs);
    std::vector<HeadSelectionSpec> specs(Hs);
    for (int s = 0; s < Hs; ++s) {
      const int src = cache_head(s, cache), T = cache.length(k, src);
      sc[s] = std::span<const float>(scores[k][s].data(), T);
      pos[s] = std::span<const int32_t>(cache.positions(k, src), T);
      specs[s] = spec_for(k, s, layer_budget[k], plan.protect);
    }
    ++report.layer_selections;
    kept[k] = selector->select_heads(sc, pos, specs);
  }
  PhaseScope editing(clock, EnginePhase::CacheEdit);
  std::vector<std::vector<size_t>> length(L, std::vector<size_t>(Hs));
  for (int k = 0; k < L; ++k)
    for (int s = 0; s < Hs; ++s) length[k][s] = cache.length(k, cache_head(s, cache));
  window_in.drop();
  cache.unfold_keep(kept);
  for (int k = 0; k < L; ++k)
    for (int s = 0; s < Hs; ++s) permute_aligned(k, s, kept[k][s], kept_list_shape(kept[k][s]), length[k][s]);
}

void EvictionEngine::State::complete_replay(const ReplayScores* r, KVCache& cache) {
  if (!replay_pending) throw std::logic_error("engine: no prefill waits for a replay");
  if (!r && awaits_replay()) throw std::logic_error("engine: the prefill needs the replay's scores");
  if (r && (r->n_layers != L || r->n_heads != Hq || r->n_kv_heads != Hkv || r->length != plan.prompt_len))
    throw std::invalid_argument("engine: the replay scores are for " + std::to_string(r->n_layers) + " layers x " +
                                std::to_string(r->n_heads) + " heads x " + std::to_string(r->length) +
                                " entries, the prefill has " + std::to_string(L) + " x " + std::to_string(Hq) + " x " +
                                std::to_string(plan.prompt_len));
  replay_pending = false;
  replay = r;
  if (r)
    for (int l = 0; l < L; ++l) {
      output_grams = held_grams[l];
      output_projection = held_projection[l];
      evaluate_layer(l, cache, /*allow_cascading=*/false);  // cascading is refused with A_replay
    }
  output_grams = output_projection = {};
  std::vector<std::vector<float>>().swap(held_grams);
  std::vector<std::vector<float>>().swap(held_projection);
  finish_prefill(cache);
  replay = nullptr;
}

void EvictionEngine::State::finish_prefill(KVCache& cache) {
  // The end of this prompt was known before its calls: the decoder was asked to bring the kept rows
  // to the host for its end (ObservationRequest::host_rows_at_prompt_end).
  const bool rows_brought_back = plan_announced || block_prompt > 0;
  in_prefill = false;
  block_prompt = 0;
  plan_announced = false;
  prefill_done = true;
  if (!report.prefill_evicted) {  // budgets still govern decode-time triggers
    PhaseScope timed(clock, EnginePhase::Selection);
    const auto budgets = layer_budgets(L - 1, plan.budget.total, cache);
    for (int k = 0; k < L; ++k) layer_budget[k] = static_cast<int>(budgets[k]);
  }
  // (Re-assigned positions are not among these: the holder of the rows re-rotates them.)
  if (prompt_had_placeholders && ((unfold && !cache.unfolded()) ||
                                  ((plan.stages.prune_key_channels || plan.stages.codebook) && !rows_brought_back)))
    throw std::logic_error("engine: policy " + desc.name +
                           " edits the cached rows at the end of its prompt "
                           "(unfolded GQA, key channels or a codebook), but the decoder left the prompt's rows on "
                           "the device (placeholder rows; cache_row_reads.h)");
  {
    PhaseScope timed(clock, EnginePhase::CacheEdit);  // the key-channel stage's signals and scores pause it
    if (unfold && !cache.unfolded()) {                // nothing evicted: every query head still gets its own copy
      cache.unfold();
      report.peak_bytes = std::max(report.peak_bytes, cache.bytes_in_use());
    }
    if (plan.stages.prune_key_channels) prune_key_channels(cache);
    if (plan.stages.codebook) apply_codebook(cache);
    // Re-assigned even when nothing was evicted (then an identity): from here on the decoder
    // appends at the cache length, as StreamingLLM's official code does.
    if (plan.stages.reassign_positions) original.start_and_reassign(cache);
  }
  fill_report(cache);
  selector->release_score_buffers();  // the prompt's held scores (a decode eviction lays its own)
  if (keeps_frozen_scores()) return;  // frozen: they stay aligned with the cache
  for (auto& layer : scores)
    for (auto& head : layer) std::vector<float>().swap(head);
}

void EvictionEngine::State::prune_key_channels(KVCache& cache) {
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hs; ++h) {
      const HeadSignals hs = signals_for(l, h, cache, false);
      PhaseScope timed(clock, EnginePhase::Scoring);  // channel_score, and the zeroing it decides
      report.pruned_key_channels += static_cast<int64_t>(prune_head_channels(policy, hs.in, cache).size());
    }
}

void EvictionEngine::State::apply_codebook(KVCache& cache) {
  Stopwatch sw(&report.codebook_seconds);
  // The graphs where the selection runs (a CUDA device for the CUDA backend): LayerSelector::similarity_graph.
  const CodebookStageResult r = apply_codebook_stage(desc.merge, cache, selector->similarity_graph());
  report.bytes_before_codebook = r.bytes_before;
  report.bytes_codebook = r.bytes_after;
  report.key_codes = r.key_codes;
  report.value_codes = r.value_codes;
  report.codebook_tokens = r.tokens;
  report.codebook_graphs_by_selector = r.graphs_by_builder;
}

void EvictionEngine::State::fill_report(const KVCache& cache) {
  report.stored_heads = cache.n_stored_heads();
  report.gqa_unfolded = cache.unfolded();
  report.layers.assign(L, std::vector<HeadReport>(cache.n_stored_heads()));
  reported_stamps.assign(static_cast<size_t>(L) * cache.n_stored_heads(), 0);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < cache.n_stored_heads(); ++h) {
      HeadReport& r = report.layers[l][h];
      r.budget = h < static_cast<int>(head_budget[l].size()) ? head_budget[l][h] : layer_budget[l];
      report_head(cache, l, h);
    }
  }
  report.bytes_kept = cache.bytes_in_use();
}

void EvictionEngine::State::report_head(const KVCache& cache, int l, int h) {
  HeadReport& r = report.layers[l][h];
  const size_t had = r.kept_positions.size();
  r.kept = cache.length(l, h);
  if (kept_count_is_output()) r.budget = r.kept;
  const int32_t* pos = positions(cache, l, h);
  const size_t slot = static_cast<size_t>(l) * cache.n_stored_heads() + h;
  if (reported_stamps.size() != static_cast<size_t>(L) * cache.n_stored_heads())
    reported_stamps.assign(static_cast<size_t>(L) * cache.n_stored_heads(), 0);
  const uint64_t stamp = cache.edit_stamp(l, h);
  // Every decode step reports every head: copying (let alone sorting) every kept position cost
  // more than the step's selection once the selection stopped being O(T) (threshold steps).
  if (reported_stamps[slot] == stamp && had <= static_cast<size_t>(r.kept)) {
    // The first `had` entries are those reported (sorted there): merge in the appended ones.
    r.kept_positions.insert(r.kept_positions.end(), pos + had, pos + r.kept);
    const auto tail = r.kept_positions.begin() + static_cast<std::ptrdiff_t>(had);
    if (!std::is_sorted(tail, r.kept_positions.end())) std::sort(tail, r.kept_positions.end());
    if (had > 0 && tail != r.kept_positions.end() && *tail < *(tail - 1))
      std::inplace_merge(r.kept_positions.begin(), tail, r.kept_positions.end());
  } else {
    r.kept_positions.assign(pos, pos + r.kept);
    if (!std::is_sorted(r.kept_positions.begin(), r.kept_positions.end()))
      std::sort(r.kept_positions.begin(), r.kept_positions.end());
  }
  reported_stamps[slot] = stamp;
  if (options.trace_selection) copy_trace(l, h, r);
}

}  // namespace kvevict
