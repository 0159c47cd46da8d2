#pragma once
// Whether a score program gives each cache entry a value made from that entry alone: the question
// score_at insertion asks (EvictionEngine::State::score_new_entries). Such a program scored over
// the newest entries only gives them the same values, bit for bit, as scored over the whole head:
// every per-t value is computed independently of the others (dsl/lowered.h: reductions over axes
// other than t accumulate each t on its own), so the engine scores just those entries, and the
// records of the entries' hidden states (core/engine/model_signals.h) need not outlive their block.
#include "dsl/lowered.h"

namespace kvevict::dsl {

// True when the output at entry t reads nothing of another entry: no reduction, window, rank or
// normalisation along a token axis, no token pair, no slot index (t itself) or entry count (T),
// no window size (W: the engine knows it only where it makes the window attention), and only
// signals whose value at an entry is that entry's own or that have no token axis
// (source_made_per_entry, core/engine/signals.h). False for an empty program.
bool scores_each_entry_alone(const LoweredProgram& program);

}  // namespace kvevict::dsl
