#pragma once
// Whether the engine, running a policy, reads the keys or values held in the cache (its rows), or
// only its lengths and positions (and keeps entries), at the prompt and in a one-token decode
// step. A decoder whose cache lives on a device uses the answer (ObservationRequest::
// cache_row_reads, core/decode/decoder.h) to leave the rows of such calls on the device and hand
// the engine a host cache of placeholder rows (LayerSignals::cache_rows_are_placeholders):
//   * decode: H2O's decode indicator reads the attention column sums the decoder computes, CAKE's
//     and TOVA's the newest query's attention (A_now), which the engine computes from the cached
//     keys on the host but takes from the decoder's column sums of the one-token block when the
//     rows are placeholders; key and value norms (key_norm, value_norm) come with the positions
//     of a head whose rows are on the device (ObservationRequest::row_norms, KVCache::held_row_norms);
//     MorphKV's and Scissorhands' the window attention of the last W queries, which the decoder
//     computes from the queries it holds (NoneGivenDecoderSignals);
//   * prompt: SnapKV, CAKE, TOVA, PyramidKV, Ada-KV read the window attention A, which the engine
//     computes from the window queries and the cached keys unless the decoder hands it over
//     (NoneGivenDecoderSignals); H2O and StreamingLLM read column sums or positions only (None;
//     StreamingLLM's re-assigned positions are re-rotated on the device by the mirror);
//   * either: K and V themselves (R-KV's redundancy, KeyDiff), K_pre, their norms (key_norm,
//     value_norm) and the values' projected L1 norms (out_norm_l1, DefensiveKV) when the program
//     scores on the decoder's device, which hands them over there
//     (CachedRowSignals::GivenOnDevice: NoneGivenDecoderSignals, the norms then not held on the host); the
//     merge-on-evict methods, which the decoder runs where the rows are (merge_given_by_decoder,
//     NoneGivenDecoderSignals).
// The predicates are conservative: an unknown feature counts as reading. The engine refuses, with a
// std::logic_error, any read of a row in a call whose rows are placeholders (engine_signals.cpp), so a
// wrong declaration fails loudly instead of scoring zeros.
#include "core/decode/decoder.h"
#include "core/engine/policy_program.h"

namespace kvevict {

// How K and V (the cached keys and values, TensorSignal::Keys / Values) and their norms (KeyNorm,
// ValueNorm) reach the score programs: copied out of the host cache's rows (the norms computed from
// them, or held with the positions), or handed over in the decoder's device memory and read there
// by a program that scores on that device (ObservationRequest::cache_keys_on_device,
// row_norms_on_device: the engine's choice when its program scores_device_signals and nothing on
// the host reads them).
enum class CachedRowSignals : uint8_t {
  ReadOnHost,
  GivenOnDevice,
};

// Sources of signals made WHILE DECODING without reading a cached key or value: the attention the
// decoder computes (column sums, and the newest query's row, A_now, as above), positions, the
// rows' norms (held with the positions where the rows are elsewhere), and what
// the engine records by original position (tokens, hidden states, prompt query statistics, the
// mean RoPE rotation), and the window queries themselves (Q, Q_pre: the decoder hands the newest
// request().window query rows in every call; O, their attention over the values, reads rows).
bool signal_source_reads_cache_rows(SignalSource source);

// Reads for a one-token decode step unless every signal the decode indicator reads (decode_reads,
// or every signal of the policy when the description does not know them) comes from a source
// above or is the window attention A over the rolling window of the last W queries, and no feature
// edits or reads rows: codebooks (not merge-on-evict: merge_given_by_decoder), key channels,
// unfolded GQA, extra selection stages, NACL's same-index head (re-assigned positions and head plans do not: the holder of the rows
// re-rotates them; head plans run at the prompt only, on prompt_reads). Then
// NoneGivenDecoderSignals when the decode indicator reads A, which a decoder computes from the
// queries it holds, causal or not (MorphKV, Scissorhands, CAKE's paper indicator, NACL with
// decode_interval > 0), else None. With GivenOnDevice, K, V, K_pre, their norms and out_norm_l1
// count as given by the decoder too (NoneGivenDecoderSignals when read: R-KV's redundancy, the decoding presses' norms). The engine narrows it per call: only while
// it asks the decoder for the window attention (EvictionEngine's decode trigger reads A).
CacheRowReads decode_cache_row_reads(const PolicyDescription& d,
                                     CachedRowSignals rows = CachedRowSignals::ReadOnHost);

// Whether the engine learns a prompt before the prompt's first forward call
// (EvictionEngine::announce_prompt, which prefill_prompt calls): then a window found from the
// prompt's length or tokens is known in time for the decoder to compute its attention.
enum class PromptAnnouncement : uint8_t {
  None,
  BeforeTheCall,
};

// Whether signal `s`, produced AT THE PROMPT, reads cached rows on the host: its source's answer
// (signal_source_reads_cache_rows: no for column sums, positions, token ids, hidden states, row
// norms, the mean RoPE rotation R_future and the window queries Q and Q_pre themselves; yes for K,
// V, K_pre, O, out_norm), except the window attention A and the segment-local attention A_seg (no:
// the decoder hands them over, the caller's NoneGivenDecoderSignals), KVzip's A_replay (no: the
// replay's own calls after the prompt read it, handed over by the decoder,
// ObservationRequest::replay_attention) and A_now (yes: at the prompt the engine attends the newest
// query over the cached keys). The prompt query statistics read no row: the decoder makes
// them (prompt_cache_row_reads counts them as handed over, NoneGivenDecoderSignals).
bool prompt_signal_reads_cache_rows(TensorSignal s);

// The signals the prompt-time programs read: prompt_reads when the description knows them, else
// every signal of the policy.
const SignalSet& prompt_signals(const PolicyDescription& d);

// What the engine reads of the cache's rows at the prompt (every block of a prefill in blocks).
// A policy that reads KVzip's A_replay is scored after the prompt, once the replay ran: None when
// every other signal it reads is made without cached rows and no feature reads them, else Reads
// (nothing the decoder hands over during the prompt's calls is held until then). Any other policy:
//   Reads when a prompt signal reads rows (prompt_signal_reads_cache_rows), or a feature does:
//     unfolded GQA, a staged selection whose later stages read A, O or rows (or whose stages
//     share one budget, or start with another program than `score`: staged_prompt_reads_rows),
//     NACL's same-index head, a window found from the tokens or from the prompt's
//     length unless the prompt is announced (else unknown before the call, so the decoder cannot
//     compute its attention; the engine, which announces, narrows this per call);
//   else NoneGivenDecoderSignals when the policy has an observation window (the engine then
//     computes A, causal or not, for every head at every prompt layer, which the decoder must hand
//     over), reads the prompt query statistics or the segment-local attention A_seg (the decoder
//     makes them: ObservationRequest::query_statistics, segment_attention), or with GivenOnDevice
//     reads K, V, K_pre, their norms or out_norm_l1 (the decoder hands over its device copy of
//     them), or has a
//     codebook or key-channel stage (prompt_end_edits_rows: the decoder brings the kept rows to
//     the host at the prompt's end, where the stage reads them; only for an announced prompt,
//     whose end is known before its calls: else Reads; the engine narrows this per call);
//   else None.
// A later block of a prefill in blocks shorter than the window reads queries of the previous block
// too; a decoder that holds them computes its A as well (ObservationRequest::window_attention).
CacheRowReads prompt_cache_row_reads(const PolicyDescription& d,
                                     CachedRowSignals rows = CachedRowSignals::ReadOnHost,
                                     PromptAnnouncement announced = PromptAnnouncement::None);

// Whether the observation window is known before the prompt arrives: not found from the tokens
// (observe.window_after_token) nor from the prompt's length. Otherwise a decoder can be asked for
// the window attention of a prompt call (ObservationRequest::window_attention) only when the
// prompt was announced (PromptAnnouncement::BeforeTheCall).
bool window_known_before_prompt(const PolicyDescription& d);

// Whether the policy's merge runs where the rows are: every merge-on-evict method (Nearest, Pivot,
// Weighted, CaM, D2O; merge_on_evict.h), not the codebook. A decoder whose cache lives on a device runs it there
// (ObservationRequest::cached_row_merges), so the merge reads no host row and its calls are
// NoneGivenDecoderSignals (the decoder must offer the merges). A codebook still reads rows.
bool merge_given_by_decoder(const PolicyMerge& merge);

// Whether the policy edits the kept rows once its prompt is done, from the host's rows: SpindleKV's
// codebook stage (merge.method codebook), ThinK's key channels (channel_score, whose reads are not
// among the prompt's: PolicyDescription::prompt_reads). Neither reads a row during the prompt's
// calls, so a decoder may leave them on its device, but must bring the kept rows to the host
// before the observer's after_forward of the call that ends the prompt
// (ObservationRequest::host_rows_at_prompt_end).
bool prompt_end_edits_rows(const PolicyDescription& d);

// The enum's name, for messages and test output.
const char* cache_row_reads_name(CacheRowReads r);

}  // namespace kvevict
