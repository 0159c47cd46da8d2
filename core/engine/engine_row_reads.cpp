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

// Member functions of a nested struct (engine_state.h declares it), so that engine_state.h need
// not list them: State is private to EvictionEngine, and so are these.
struct EvictionEngine::State::RowReads {
  // Whether the next call after the prompt triggers the decode eviction (one step, whatever its tokens).
  static bool next_call_triggers(const State& s) {
    const int next = s.decode_step + 1;
    return s.plan.decode.every > 0 && next % s.plan.decode.every == 0;
  }

  // The host works on every appended row: scores frozen at insertion, a codebook's approximation,
  // key channels, an unfolded cache.
  static bool host_works_on_every_append(const State& s) {
    return s.keeps_frozen_scores() || s.unfold || s.desc.channels.enabled ||
           (s.desc.merge.enabled && s.desc.merge.method == MergeMethod::Codebook);
  }

  // A several-token call after the prompt (the eval sweep's question block, teacher forcing): None
  // when it does not trigger the decode eviction and the host does not work on every appended row
  // (it records by position and column sums, and scores nothing: SnapKV, and R-KV or CAM between
  // their triggers); else Reads (the decode indicator's A_now must be the block's last query's
  // row, which its column sums are not).
  static CacheRowReads block_call_row_reads(const State& s) {
    return !next_call_triggers(s) && !host_works_on_every_append(s) ? CacheRowReads::None : CacheRowReads::Reads;
  }

  // A decode step's declaration. A step that does not trigger the decode eviction (decode_every
  // > 1: R-KV every 128 steps, CAM every 512) scores nothing, so it reads no row whatever the
  // indicator reads (None): its rows come to the host once, at the next trigger step. Unless the
  // scores are frozen at insertion (scored every step) or the host works on every appended row (a
  // codebook's approximation, key channels). NoneGivenDecoderSignals over the rolling window's A
  // only while the decoder is asked for the window attention (the decode trigger reads A).
  static CacheRowReads decode_call_row_reads(const State& s) {
    if (!next_call_triggers(s) && !host_works_on_every_append(s)) return CacheRowReads::None;
    if (s.decode_row_reads != CacheRowReads::NoneGivenDecoderSignals) return s.decode_row_reads;
    const bool reads_window = s.desc.run.decode_uses_window_attention;
    return !reads_window || s.requested_window_attention() > 0 ? s.decode_row_reads : CacheRowReads::Reads;
  }

  // The prompt's declaration: NoneGivenDecoderSignals holds for a policy with a window only when
  // the decoder is asked for the window attention (it then covers the newest min(W, position)
  // queries, a later block's previous ones included, or does not serve it: the decoder's
  // serves_window_attention). K and V on the device are asked for whenever rows_in_place (request()).
  static CacheRowReads prompt_call_row_reads(const State& s) {
    if (s.prompt_row_reads != CacheRowReads::NoneGivenDecoderSignals) return s.prompt_row_reads;
    // A codebook or key-channel stage needs the kept rows at the prompt's end: a decoder can be
    // asked to bring them back then only when the end is known before the call
    // (ObservationRequest::host_rows_at_prompt_end).
    if (prompt_end_edits_rows(s.desc) && s.prompt_end_before_call() == 0) return CacheRowReads::Reads;
    // prompt_row_reads takes the window as known (PromptAnnouncement::BeforeTheCall); a window found
    // from a prompt nobody announced is not, and the engine then computes A from the host's rows.
    if (!s.prompt_window_known()) return CacheRowReads::Reads;
    const int window = s.announced || s.blocks_pending() ? s.next_prompt_plan().window : s.desc.window;
    return window <= 0 || !s.window_attention_read() || s.requested_window_attention() > 0 ? s.prompt_row_reads
                                                                                           : CacheRowReads::Reads;
  }

  // ObservationRequest::cache_row_reads. A call at position 0 starts a prompt; a later call
  // continues a prefill in blocks (its next block), or is a decode step once the prompt is done
  // (several tokens then: block_call_row_reads). A fresh engine takes a later call as a prompt over
  // rows it never saw: Reads.
  static CacheRowReadsByCall cache_row_reads_by_call(const State& s) {
    CacheRowReadsByCall by;
    by.prompt_start = prompt_call_row_reads(s);
    if (s.blocks_pending()) {
      by.next_token = by.next_block = prompt_call_row_reads(s);
    } else if (s.prefill_done && !s.in_prefill) {
      by.next_token = decode_call_row_reads(s);
      by.next_block = block_call_row_reads(s);
    }
    return by;
  }

  // ObservationRequest::host_rows_not_read_later: no decode step reads a row on the host (no decode
  // eviction, or one over row-free signals: None), so a device cache may drop the host's copy of
  // its rows after this call (a later call that reads rows, a question block, brings them back).
  // Not while a prefill in blocks has blocks to come after this call, nor for a context replay or
  // a host that works on every append (their calls read the rows again).
  static bool host_rows_not_read_later(const State& s) {
    if (host_works_on_every_append(s) || reads_replay(s.desc)) return false;
    if (s.block_prompt > 0) {
      const int remaining = s.in_prefill ? s.block_prompt - s.prefill_seen : s.block_prompt;
      if (remaining > s.plan.prefill.block) return false;
    }
    return s.plan.decode.every <= 0 || s.decode_row_reads == CacheRowReads::None;
  }
};

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
  r.cache_row_reads = State::RowReads::cache_row_reads_by_call(*state_);
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
  r.host_rows_not_read_later = State::RowReads::host_rows_not_read_later(*state_);
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
