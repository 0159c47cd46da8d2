// See cache_row_reads.h.
#include "core/engine/cache_row_reads.h"

#include "core/engine/query_checks.h"
#include "core/engine/replay_checks.h"

namespace kvevict {

bool signal_source_reads_cache_rows(SignalSource source) {
  switch (source) {
    case SignalSource::LatestQuery:  // A_now: from the decoder's column sums when rows are placeholders
    case SignalSource::ColumnSums:
    case SignalSource::Positions:
    case SignalSource::Tokens:
    case SignalSource::HiddenStates:
    case SignalSource::HiddenVectors:
    case SignalSource::PromptQueries:
    case SignalSource::RopeRotation:
    case SignalSource::WindowQueryRows:  // the queries alone, as the decoder hands them (request().window)
    case SignalSource::RowNorms: return false;  // held with the positions where the rows are not (KVCache)
    case SignalSource::WindowQueries:   // the host attends the window queries over the cached keys
    case SignalSource::CachedKeys:
    case SignalSource::CachedValues:
    case SignalSource::SegmentQueries:
    case SignalSource::OutputProjection:  // the cached values through W_o
    case SignalSource::Replay: return true;
  }
  return true;
}

// Features that read or rewrite cached rows outside the signals, at the prompt and while decoding
// alike: codebooks (SpindleKV's stage rewrites whole heads; merge-on-evict runs where the rows are:
// merge_given_by_decoder), key channels (zeroed in the rows), unfolded GQA
// (copies the rows), extra stages (conservative: programs of their own), NACL's same-index head (its
// own attention over the keys). Not among them: re-assigned positions (the keys are re-rotated by
// whoever holds the rows: KVCache::reassign_positions, on a device DeviceKvMirror; the engine reads
// only positions), and head plans (head_mode / head_weight run at the prompt only, on the signals
// the prompt's programs read, prompt_reads; while decoding the heads keep the budgets planned then).
static bool feature_reads_cache_rows(const PolicyDescription& d) {
  return (d.merge.enabled && !merge_given_by_decoder(d.merge)) || d.channels.enabled || d.select.unfold_gqa ||
         !d.select.stages.empty() || d.observe.same_index_head;
}

// Whether a staged selection's prompt reads rows on the host: its first stage scores with the
// file's `score` at each layer's turn (the engine takes those scores: evict_staged), but its later
// stages score the heads the earlier ones cut, where no window attention handed over fits, so a
// later stage reading A, O or a signal made from rows on the host (K, V, ...: the stages are scored
// on the host, scores_signals_in_place) reads rows; so do shares of one budget (every stage scored
// at the selection), a first stage with another program, and stages whose reads are not known.
static bool staged_prompt_reads_rows(const PolicyDescription& d) {
  const auto& stages = d.select.stages;
  if (stages.empty()) return false;
  if (stages.front().share > 0 || stages.front().program != 0) return true;
  for (size_t i = 1; i < stages.size(); ++i) {
    if (!stages[i].reads_known) return true;
    for (const TensorSignalInfo& info : kTensorSignalTable)
      if (stages[i].reads[signal_index(info.id)] &&
          (info.id == TensorSignal::WindowAttention || info.id == TensorSignal::WindowOutputs ||
           prompt_signal_reads_cache_rows(info.id)))
        return true;
  }
  return false;
}

// The same during a prompt's calls: the codebook and key-channel stages edit the kept rows once
// the prompt is done, from rows the decoder brings to the host for them
// (ObservationRequest::host_rows_at_prompt_end); staged selections as above.
static bool feature_reads_cache_rows_during_prompt(const PolicyDescription& d) {
  return d.select.unfold_gqa || staged_prompt_reads_rows(d) || d.observe.same_index_head;
}

bool prompt_end_edits_rows(const PolicyDescription& d) {
  return (d.merge.enabled && d.merge.method == MergeMethod::Codebook) || d.channels.enabled;
}

bool merge_given_by_decoder(const PolicyMerge& merge) {
  // Every merge-on-evict method merges through CachedRowMerges alone (merge_on_evict.h).
  return merge.enabled && merge.method != MergeMethod::Codebook;
}

// K and V as cached, their norms and the values' projected L1 norms, which a program scoring on the
// decoder's device reads there (GivenOnDevice).
static bool given_on_device(TensorSignal s, CachedRowSignals rows) {
  return rows == CachedRowSignals::GivenOnDevice &&
         (s == TensorSignal::Keys || s == TensorSignal::Values || s == TensorSignal::KeysPreRope ||
          s == TensorSignal::KeyNorm || s == TensorSignal::ValueNorm || s == TensorSignal::OutputNormL1);
}

CacheRowReads decode_cache_row_reads(const PolicyDescription& d, CachedRowSignals rows) {
  const SignalSet& reads = d.decode_reads_known ? d.decode_reads : d.reads;
  const bool window = d.run.decode_uses_window_attention;
  bool given_rows = false;
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    if (!reads[signal_index(info.id)]) continue;
    if (info.id == TensorSignal::WindowAttention && window) continue;  // below
    if (given_on_device(info.id, rows)) {
      given_rows = true;
      continue;
    }
    if (signal_source_reads_cache_rows(info.source)) return CacheRowReads::Reads;
  }
  if (feature_reads_cache_rows(d)) return CacheRowReads::Reads;
  // The rolling window's A (the last W queries, generated ones included), causal or not, from the
  // decoder: the window is the prompt's by then, whatever it was found from (NACL's proxy share).
  // A hand-made description (decode reads unknown) is taken to read more.
  if (!window && !given_rows && !merge_given_by_decoder(d.merge)) return CacheRowReads::None;
  return d.decode_reads_known ? CacheRowReads::NoneGivenDecoderSignals : CacheRowReads::Reads;
}

bool prompt_signal_reads_cache_rows(TensorSignal s) {
  switch (s) {
    case TensorSignal::WindowAttention: return false;  // given by the decoder (NoneGivenDecoderSignals)
    // Made by the decoder in the prompt's call (ObservationRequest::segment_attention): its own clause.
    case TensorSignal::SegmentAttention: return false;
    // Made by the decoder in the replay's calls after the prompt (ObservationRequest::
    // replay_attention, whose observer declares its own reads); the prompt's calls read nothing for
    // it (replay_prompt_row_reads: what else such a policy reads).
    case TensorSignal::ReplayAttention: return false;
    // The newest query's row at the prompt is attended over the cached keys on the host: the
    // decoder's column sums stand in for it only in one-token decode steps.
    case TensorSignal::CurrentAttention: return true;
    // The prompt query statistics read no cached row, but every query of the prompt: their own
    // clause (prompt_cache_row_reads).
    default: return signal_source_reads_cache_rows(signal_info(s).source);
  }
}

const SignalSet& prompt_signals(const PolicyDescription& d) { return d.prompt_reads_known ? d.prompt_reads : d.reads; }

// A policy that reads A_replay is scored after the prompt, once its replay ran (finish_replay),
// where nothing a decoder handed over during the prompt's calls is held any more (the window or
// segment attention, rows on its device): its prompt reads no row only when every other signal it
// reads is made without the cached rows, and no feature reads them.
static CacheRowReads replay_prompt_row_reads(const PolicyDescription& d) {
  const SignalSet& reads = prompt_signals(d);
  for (const TensorSignalInfo& info : kTensorSignalTable)
    if (reads[signal_index(info.id)] && info.id != TensorSignal::ReplayAttention &&
        signal_source_reads_cache_rows(info.source))
      return CacheRowReads::Reads;
  return feature_reads_cache_rows_during_prompt(d) || prompt_end_edits_rows(d) ? CacheRowReads::Reads
                                                                             : CacheRowReads::None;
}

CacheRowReads prompt_cache_row_reads(const PolicyDescription& d, CachedRowSignals rows, PromptAnnouncement announced) {
  if (reads_replay(d)) return replay_prompt_row_reads(d);
  const SignalSet& reads = prompt_signals(d);
  bool given_rows = false;
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    if (!reads[signal_index(info.id)]) continue;
    if (given_on_device(info.id, rows)) {
      given_rows = true;
      continue;
    }
    if (prompt_signal_reads_cache_rows(info.id)) return CacheRowReads::Reads;
  }
  // Recorded or computed at the prompt whoever reads them (the engine keys them on `reads`).
  if (feature_reads_cache_rows_during_prompt(d)) return CacheRowReads::Reads;
  // The prompt query statistics and the segment attention come from the decoder
  // (ObservationRequest::query_statistics, segment_attention).
  given_rows = given_rows || reads_query_statistics(d) || d.observe.segment > 0;
  // A window the decoder cannot know before the call (the engine then asks it for no window
  // attention, and computes A on the host), unless the prompt was announced. Causal or not, the
  // decoder computes it.
  if (!window_known_before_prompt(d) && announced == PromptAnnouncement::None) return CacheRowReads::Reads;
  // Nor can it be asked for the rows at the end of a prompt whose end it does not know before the call.
  if (prompt_end_edits_rows(d) && announced == PromptAnnouncement::None) return CacheRowReads::Reads;
  // The rows brought back for the codebook or key-channel stage are the decoder's part too.
  given_rows = given_rows || prompt_end_edits_rows(d);
  return d.window > 0 || given_rows || merge_given_by_decoder(d.merge) ? CacheRowReads::NoneGivenDecoderSignals
                                                                       : CacheRowReads::None;
}

bool window_known_before_prompt(const PolicyDescription& d) {
  // A hand-made description (prompt_reads unknown: not the DSL's) that depends on the prompt's
  // length is taken to have such a window.
  const bool from_length = d.window_depends_on_prompt_len || (d.depends_on_prompt_len && !d.prompt_reads_known);
  return d.observe.window_after_token < 0 && !from_length;
}

const char* cache_row_reads_name(CacheRowReads r) {
  switch (r) {
    case CacheRowReads::Reads: return "Reads";
    case CacheRowReads::None: return "None";
    case CacheRowReads::NoneGivenDecoderSignals: return "NoneGivenDecoderSignals";
  }
  return "?";
}

}  // namespace kvevict
