// What the engine asks of the decoder for its next call (EvictionEngine::request, engine_state.h):
// the query window, the window attention and which cached rows each kind of call reads.
#include "core/engine/engine_state.h"

namespace kvevict {

bool EvictionEngine::State::decoder_window_attention() const {
  return next_prompt_plan().window > 0 && !desc.observe.same_index_head && window_attention_read();
}

bool EvictionEngine::State::window_attention_read() const {
  return desc.observe.segment <= 0 || desc.needs(TensorSignal::WindowAttention) ||
         desc.needs(TensorSignal::WindowOutputs) || desc.merge.enabled;
}

bool EvictionEngine::State::prompt_window_known() const {
  if (announced || window_known_before_prompt(desc)) return true;
  return blocks_pending() && (plan_announced || desc.observe.window_after_token < 0);
}

int EvictionEngine::State::requested_window_attention() const {
  if (!decoder_window_attention()) return 0;
  if (announced || !prefill_done || in_prefill) return prompt_window_known() ? next_prompt_plan().window : 0;
  const bool decode_reads = plan.decode.every > 0 && plan.decode.uses_window_attention;
  return decode_reads ? plan.window : 0;
}

CacheRowReadsByCall EvictionEngine::State::cache_row_reads_by_call() const {
  CacheRowReadsByCall by;
  by.prompt_start = prompt_call_row_reads();
  if (blocks_pending()) {
    by.next_token = by.next_block = prompt_call_row_reads();
  } else if (prefill_done && !in_prefill) {
    by.next_token = decode_call_row_reads();
    by.next_block = block_call_row_reads();
  }
  return by;
}

bool EvictionEngine::State::next_call_triggers() const {
  const int next = decode_step + 1;
  return plan.decode.every > 0 && next % plan.decode.every == 0;
}

CacheRowReads EvictionEngine::State::block_call_row_reads() const {
  return !next_call_triggers() && !host_works_on_every_append() ? CacheRowReads::None : CacheRowReads::Reads;
}

CacheRowReads EvictionEngine::State::decode_call_row_reads() const {
  if (!next_call_triggers() && !host_works_on_every_append()) return CacheRowReads::None;
  if (decode_row_reads != CacheRowReads::NoneGivenDecoderSignals) return decode_row_reads;
  const bool reads_window = desc.run.decode_uses_window_attention;
  return !reads_window || requested_window_attention() > 0 ? decode_row_reads : CacheRowReads::Reads;
}

bool EvictionEngine::State::host_works_on_every_append() const {
  return keeps_frozen_scores() || unfold || desc.channels.enabled ||
         (desc.merge.enabled && desc.merge.method == MergeMethod::Codebook);
}

bool EvictionEngine::State::host_rows_not_read_later() const {
  if (host_works_on_every_append() || reads_replay(desc)) return false;
  if (block_prompt > 0) {
    const int remaining = in_prefill ? block_prompt - prefill_seen : block_prompt;
    if (remaining > plan.prefill.block) return false;
  }
  return plan.decode.every <= 0 || decode_row_reads == CacheRowReads::None;
}

CacheRowReads EvictionEngine::State::prompt_call_row_reads() const {
  if (prompt_row_reads != CacheRowReads::NoneGivenDecoderSignals) return prompt_row_reads;
  // A codebook or key-channel stage needs the kept rows at the prompt's end: a decoder can be
  // asked to bring them back then only when the end is known before the call
  // (ObservationRequest::host_rows_at_prompt_end).
  if (prompt_end_edits_rows(desc) && prompt_end_before_call() == 0) return CacheRowReads::Reads;
  // prompt_row_reads takes the window as known (PromptAnnouncement::BeforeTheCall); a window found
  // from a prompt nobody announced is not, and the engine then computes A from the host's rows.
  if (!prompt_window_known()) return CacheRowReads::Reads;
  const int window = announced || blocks_pending() ? next_prompt_plan().window : desc.window;
  return window <= 0 || !window_attention_read() || requested_window_attention() > 0 ? prompt_row_reads
                                                                                       : CacheRowReads::Reads;
}

void EvictionEngine::announce_prompt(std::span<const int> tokens) {
  State& st = *state_;
  if (tokens.empty()) throw std::invalid_argument("announce_prompt: the prompt must have tokens");
  withdraw_announcement();  // a refused prompt leaves no announcement behind
  st.announced = make_eviction_plan(st.policy, st.plan.geometry, st.options.budget, static_cast<int>(tokens.size()),
                                    tokens);
  st.announced_tokens.assign(tokens.begin(), tokens.end());
}

void EvictionEngine::withdraw_announcement() {
  state_->announced.reset();
  state_->announced_tokens.clear();
}

void EvictionEngine::State::ask_for_query_signals(ObservationRequest& r, bool prompt_next) const {
  // A segment-local observation: the decoder makes A_seg in the prompt's call
  // (ObservationRequest::segment_attention) when the prompt comes next with its window known;
  // otherwise every query of the prompt is handed over (a view on the CPU, a download from a
  // device) and SegmentQueries keeps the observation rows, from which the engine computes it.
  if (desc.observe.segment > 0) {
    if (prompt_next && prompt_window_known()) {
      const PolicyObserve& o = desc.observe;
      r.segment_attention = {o.segment, next_prompt_plan().window, o.causal, o.scaled};
    } else {
      r.window = config.context_length;
    }
  }
  // A window found from the tokens is unknown until the prompt arrives (unless announced): the
  // whole block is seen (a view, no copy).
  if (prompt_next && desc.observe.window_after_token >= 0 && !announced)
    r.window = config.context_length;
  // The prompt query statistics: the decoder makes each block's from its own queries (no query row
  // comes over for them).
  if (prompt_next) r.query_statistics = query_stats.request();
  else if (query_stats.active()) r.window = config.context_length;
}

ObservationRequest EvictionEngine::request() const {
  ObservationRequest r;
  r.window = state_->next_prompt_plan().query_window;
  // A prompt comes next: announced, or the engine's first. (A prompt after decode steps that
  // nobody announced is taken for a decode call: it reads rows, prompt_call_row_reads, and gets no
  // query statistics nor segment attention from the decoder: every query of each call is asked for
  // instead, below, from which the engine makes them when the call turns out to be a prompt.)
  const bool prompt_next = state_->announced || !state_->prefill_done;
  // A window that depends on the prompt length is unknown until the prompt arrives, unless it was
  // announced: ask for every query of the block (the decoder hands out a view of its query buffer,
  // no copy; a device decoder downloads them); the engine keeps only the rows it needs once
  // window_for(prompt_len) is known.
  if (state_->desc.depends_on_prompt_len && !state_->prefill_done && !state_->announced)
    r.window = state_->config.context_length;
  r.accumulated_attention = state_->desc.needs(TensorSignal::AccumulatedAttention) ||
                            MergeOnEvictState::needs_decode_attention(state_->desc.merge);
  // A policy that reads no cached row lets a device cache keep the call's rows to itself
  // (cache_row_reads.h). While decoding, A_now then comes from the decoder's column sums
  // (LayerSignals::cache_rows_are_placeholders), so those are asked for.
  r.cache_row_reads = state_->cache_row_reads_by_call();
  const DeviceReads& device = state_->device_reads;
  if (r.cache_row_reads.next_token != CacheRowReads::Reads && !prompt_next &&
      state_->desc.needs(TensorSignal::CurrentAttention)) {
    r.accumulated_attention = true;
    // Scored on the device: the decoder's device copy is read in place, no host copy is needed.
    r.column_sums_on_device_only = device.current_in_place;
  }
  // Accumulated on the device: every block's sums are added where the decoder left them, unless
  // something on the host reads them (then A_now is not in place either).
  if (device.accumulated_in_place && !host_reads_column_sums(state_->desc, device.accumulated_in_place) &&
      (!state_->desc.needs(TensorSignal::CurrentAttention) || device.current_in_place))
    r.column_sums_on_device_only = true;
  state_->ask_for_query_signals(r, prompt_next);
  r.hidden_norms = state_->desc.needs(TensorSignal::HiddenNorm);
  r.output_grams = state_->desc.needs(TensorSignal::OutputNorm);
  r.output_projection = state_->desc.needs(TensorSignal::OutputNormL1);
  r.hidden_states = state_->desc.needs(TensorSignal::HiddenState);
  r.hidden_states_on_device = device.hidden_states_in_place;  // the block's, read in place where it is made
  // Norms held with the positions on the host, or (scored on the device) handed over in place.
  const bool norms = state_->desc.needs_row_norms();
  r.row_norms = norms && !device.norms_in_place;
  r.row_norms_on_device = norms && device.norms_in_place;
  r.window_attention = state_->requested_window_attention();
  r.window_attention_causal = state_->desc.observe.causal;
  // While decoding, the rows the engine holds itself: a decoder first asked for the window
  // attention now (NACL's window, found from the prompt's length) starts from them.
  if (r.window_attention > 0 && !prompt_next && !state_->in_prefill)
    for (int l = 0; l < state_->L; ++l)
      r.observer_queries.push_back({state_->recent.data(l), state_->recent.rows(l), state_->recent.first_position(l)});
  r.host_rows_not_read_later = state_->host_rows_not_read_later();
  // Scored on the device: K, V and K_pre (and the norms above) are read where the decoder copies them out,
  // in the calls this engine declared NoneGivenDecoderSignals (the others have the rows on the host,
  // or read none).
  r.cache_keys_on_device = device.rows_in_place && state_->desc.needs(TensorSignal::Keys);
  r.cache_values_on_device = device.rows_in_place && state_->desc.needs(TensorSignal::Values);
  r.cache_keys_pre_rope_on_device = device.rows_in_place && state_->desc.needs(TensorSignal::KeysPreRope);
  // ... and the values' projected L1 norms (output_projection above stays asked for: the host's
  // fallback in a call whose rows are on the host).
  r.out_norms_l1_on_device = device.rows_in_place && state_->desc.needs(TensorSignal::OutputNormL1);
  r.positions_on_device = device.positions_in_place || device.positions_to_selector;
  // Merges run where the rows are (cache_row_reads.h: such a merge reads no host row).
  r.cached_row_merges = merge_given_by_decoder(state_->desc.merge);
  // The codebook or key-channel stage at the prompt's end reads the kept rows: brought to the host
  // by then (prompt_call_row_reads declared the prompt's calls Reads where the end is not known).
  if (prompt_next && prompt_end_edits_rows(state_->desc)) r.host_rows_at_prompt_end = state_->prompt_end_before_call();
  return r;
}

}  // namespace kvevict
