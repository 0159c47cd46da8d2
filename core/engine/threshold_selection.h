#pragma once
// Threshold selection (policy file `select.threshold`; kvpress DMSPress): a head keeps its
// protected entries and every candidate whose score is at least the threshold, but never more
// than its budget. The budget is the memory bound: a threshold can only evict more than the top-k
// of that budget would, never keep more. The kept count is an output (the engine records it as the
// head's budget in the report).
//
// Why a budget and not a second selection rule: the candidates at or above the threshold are
// exactly the top n_pass candidates under the engine's tie rule (selection.h: higher score first,
// NaN last), so "threshold, capped at the budget" is select_head with the budget
// min(budget, protected + n_pass). One selection mechanism, and ties at the cap follow the tie rule.
#include <cstdint>
#include <span>

namespace kvevict {

// The budget the threshold leaves one head: min(cap, |protected| + #{non-protected entries with
// score >= threshold}) (a NaN score never passes), and at most cap when cap is below the protected
// count. `scores` and `positions` are aligned with the head's cache order.
int threshold_budget(std::span<const float> scores, std::span<const int32_t> positions, int cap, int protect_first,
                     int protect_recent, double threshold);

}  // namespace kvevict
