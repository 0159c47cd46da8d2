#pragma once
// Whether a policy's one-token decode step reads the keys or values held in the cache, or only
// its lengths and positions (and keeps entries). A decoder whose cache lives on a device uses the
// answer (ObservationRequest::decode_step_reads_cache_rows) to leave new rows on the device during
// observed decode calls: H2O's decode indicator reads the attention column sums the decoder
// computes, CAKE's and TOVA's the newest query's attention (A_now), which the engine computes from
// the cached keys on the host but takes from the decoder's column sums of the one-token block when
// the rows are placeholders (LayerSignals::cache_rows_are_placeholders).
#include "core/engine/policy_program.h"

namespace kvevict {

// Sources of signals made without reading a cached key or value: the attention the decoder
// computes (column sums, and the newest query's row, A_now, as above), positions, and what the
// engine records by original position (tokens, hidden states, prompt query statistics, the mean
// RoPE rotation).
bool signal_source_reads_cache_rows(SignalSource source);

// True unless every signal the decode indicator reads (decode_reads, or every signal of the policy
// when the description does not know them) comes from a source above, the decode step computes
// no window attention on the host, and no feature edits or reads rows: merges and codebooks,
// re-assigned positions, key channels, unfolded GQA, head plans, extra selection stages, NACL's
// same-index head. Conservative: an unknown feature counts as reading.
bool decode_step_reads_cache_rows(const PolicyDescription& d);

}  // namespace kvevict
