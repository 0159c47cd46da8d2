#pragma once
// Head-level budgets (policy files' `head_mode` and `head_weight` programs, docs/DSL.md §11): how
// the budget of one layer is split among its KV heads when a policy says that heads differ.
//
// MEANING OF THE BUDGET. A layer's budget B (tokens per KV head, protected tokens included; the
// layer split of budget_allocator.h is unchanged) is shared by the layer's *compressed* heads:
//   full       keeps every entry (DuoAttention's retrieval heads, RLKV's reasoning heads); it does
//              not count against the budget, which cannot honour it anyway
//   streaming  keeps only the protected sets (protect.first sinks + protect.recent window):
//              DuoAttention's streaming heads, RLKV's compressed heads; no budget either
//   compressed the n_c compressed heads of the layer share n_c * B exactly (integer budgets that add
//              up, allocate_budgets), in proportion to their head_weight (uniform without one),
//              each floored at its protected count and capped at its length (HeadKV, LUKV)
// With select.head_allocation: tokens (LUKV) a compressed head's head_weight is instead its own
// keep count in tokens, a real number c_h; the layer's counts are rounded as LUKVPress rounds its
// curve (round_head_counts), and the layer's budget B does not enter.
// So DuoAttention's and RLKV's memory follows from their head tables, not from the run's budget,
// as in their papers; a policy mixing the three modes spends B per compressed head on average.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/engine/policy_modes.h"

namespace kvevict {

// Values of the head_mode program (the DSL names compressed, full, streaming evaluate to these).
enum class HeadMode : int { Compressed = 0, Full = 1, Streaming = 2 };

struct HeadPlan {
  HeadMode mode = HeadMode::Compressed;
  double weight = 1.0;  // share among the compressed heads of the layer (negative / NaN count as 0)
};

// The head_mode program's value as a mode: 0, 1 or 2 (rounded); anything else is compressed.
HeadMode head_mode_from_value(double v);

// Per-head budgets of one layer: `layer_budget` per compressed head on average (see above),
// `length[h]` the entries head h holds, `protected_count` the protected entries of a head.
// Result: full -> length; streaming -> min(length, protected_count); compressed heads add up to
// min(n_c * layer_budget, their total length) exactly, each within [min(protected, length), length].
// With allocation Tokens the compressed heads get round_head_counts of their weights instead.
std::vector<int> split_head_budgets(int layer_budget, const std::vector<HeadPlan>& plans, const std::vector<int>& length,
                                    int protected_count, HeadAllocation allocation = HeadAllocation::Share);

// LUKVPress's rounding of real keep counts c_h (>= 0) of n heads holding length[h] entries: the
// total round(sum c) (half to even, as torch.round), clamped to [n, sum length]; each head
// floor(c_h); the remainder, if positive, adds 1 to each of the min(remainder, n) heads with the
// largest fractional parts (ties: lower head first); finally each count is clamped to
// [1, length[h]] (to 0 for an empty head), so the total is exact unless a clamp bites. The
// protected entries count inside a head's count and are not a floor (select_head keeps them by
// priority when the count is smaller).
std::vector<int64_t> round_head_counts(const std::vector<double>& counts, const std::vector<int64_t>& length);

}  // namespace kvevict
