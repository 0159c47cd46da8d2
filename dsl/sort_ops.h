#pragma once
// Rank and sort statistics of the policy language (docs/DSL.md §6): selection rules that are not a
// fixed top-k ("the fewest entries whose sorted mass reaches p", "the entries above the median").
// One lowered node, NodeOp::Sort (dsl/lowered.h), along ONE axis of its operand:
//
//   rank(t: x)           for every element, its 0-based rank along the axis in DESCENDING order of
//                        x. ORDER: i is before j when x_i > x_j, or x_i == x_j and i < j (ties: the
//                        lower index first; -0 equals +0); a NaN is after every number (NaNs among
//                        themselves by index). Same shape as x (a scan along the axis).
//   sorted_cumsum(t: x)  for every element, the sum of x over the elements ranked BEFORE it in that
//                        order (exclusive: the first is 0). Same shape as x. "The fewest entries
//                        whose sorted mass reaches p" is `sorted_cumsum(t: x) < p * sum(t: x)`;
//                        the entries whose inclusive sum stays below p (CriticalKV's count) are
//                        `sorted_cumsum(t: x) + x < p * sum(t: x)`.
//   quantile(t: x, p)    the p-quantile along the axis (a reduction: the axis is removed), LINEAR
//                        interpolation (numpy's and torch.quantile's default): with the n values
//                        sorted ascending v_0 <= .. <= v_{n-1}, pos = p (n - 1), lo = floor(pos),
//                        hi = min(lo + 1, n - 1), result = v_lo + (pos - lo) (v_hi - v_lo) in
//                        double, rounded to float. p is clamped to [0, 1]; a NaN p or any NaN
//                        among the values gives NaN (as torch.quantile); n = 0 gives 0.
//
// ROUNDING: ranks are exact integers (as floats: exact below 2^24 elements). sorted_cumsum
// accumulates in double and rounds to float once. The interpreter adds in rank order; the CUDA
// generator (an in-thread loop over the axis, jit/cuda_codegen.cpp) adds the same terms in index
// order, so the two agree within one float ulp (the double sums differ by at most n 2^-53
// relative), not always bit for bit. Quantiles and ranks are bit-identical.
//
// STATIC RULES (checker, `sort_operand_error`): exactly one axis binder (no window variable), an
// axis of the program that is not already bound; the operand is a number that depends on that
// axis and is not a token pair (a T x T value is never materialised, so it cannot be sorted); not
// inside a token window; quantile's level is a scalar number.
//
// COST: the interpreter sorts each slice (a copy of n floats and n indices per slice, one slice at
// a time per thread): O(n log n) time, O(n) memory; the CUDA generator's loops are O(n^2) per
// slice (O(T^2) for a rank over t, like a pairwise term).
#include <cstdint>
#include <string>

#include "dsl/lowered.h"

// No comments inside: the macro is also stringified into kernel source. True when the element
// (xj, j) comes before (xi, i) in the descending ORDER above.
#define KVEVICT_DEFINE_SORT_BEFORE(FN)                                                           \
  FN int kv_sort_before(float xj, long long j, float xi, long long i) {                          \
    if (xj != xj) return (xi != xi) && j < i;                                                    \
    if (xi != xi) return 1;                                                                      \
    return xj > xi || (xj == xi && j < i);                                                       \
  }

namespace kvevict::dsl {

// The DSL names of the three operations; `sort_fn` returns false for any other name.
bool sort_fn(const std::string& name, SortFn& out);
const char* sort_name(SortFn f);

// "" when `f` may run along `axis` over an operand of shape `operand` (the rules above, after the
// binder checks), else the error message.
std::string sort_operand_error(SortFn f, unsigned axis, unsigned operand);

// ---- The interpreter's node (dsl/lowered.h: Sort) ----
// The operand viewed as [outer][n][inner] (the sorted axis has extent n and stride inner, the
// canonical dense layout); out is [outer][n][inner] for Rank and SortedCumsum, [outer][inner] for
// Quantile (level p). OpenMP over slices for large tensors; results do not depend on threads.
void evaluate_sort(SortFn f, const float* a, int64_t outer, int64_t n, int64_t inner, float level, float* out);

}  // namespace kvevict::dsl
