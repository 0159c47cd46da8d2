#pragma once
// Token-pair tiles of the interpreter (dsl/lowered.h, TOKEN PAIRS). A node whose shape has both
// token axes s and t is never materialised: each reduction that removes s or t from such a node
// (an exit) evaluates the token-pair nodes it depends on in tiles of s (all of t), reading the
// other nodes (leaves: computed before it, in topological order) as they are, or the tile's rows
// of s. Memory per tile: at most kPairTileElements floats per token-pair node (at least one row
// of s; the checker bounds a row to max(n_kv_heads, G, head_dim) x T numbers).
//
// Two exits whose value never needs every pair take a shortcut with the same result bit for bit,
// when every token-pair node they depend on is element-wise along t (no token window, no
// normalise): the last (first) index where a condition holds, `max(t: if(P, t, c))`
// (`min(t: ...)`) with a constant c, scans blocks of t from the end (the start), each row of s until
// no unseen column can change its values, reading P in place (the select is never materialised) (R-KV's "last partner above the threshold": a few
// blocks when partners are common, all of them when none is); a sum over s of a value selected at
// one column per row, `sum(s: if(t == X[s], Y[s, t], 0))` (or `mean`, either side of the `==`),
// evaluates Y at the points (s, X[s]) only: O(T) pairs instead of O(T^2).
#include <functional>

#include "dsl/interpreter_layout.h"

namespace kvevict::dsl::interp {

// Computes node `index` (whose description is `node`, possibly with another reducer) from the
// buffers of its operands into bufs[index], under layout L.
using ComputeNode = std::function<void(int index, const Node& node, const Layout& L, std::vector<Buf>& bufs)>;

// Which nodes of p are exits (a Reduce of a token-pair operand that is not a token pair itself).
bool is_pair_exit(const LoweredProgram& p, int i);

// For every node, the last node at which the interpreter reads its buffer: a token-pair node and
// a fused product (`fused`) are read where they are evaluated (at their exits, their contracting
// reductions), so their operands stay alive until then. -1 for a node nobody reads.
std::vector<int> physical_last_use(const LoweredProgram& p, const std::vector<bool>& fused);

// How an exit is evaluated (a pure function of the program, so tests can see which path runs).
enum class PairExitKind { Tiles, IndexScan, PointSum };
PairExitKind pair_exit_kind(const LoweredProgram& p, int exit);

// Evaluates exit node `exit` tile by tile into bufs[exit] (an array from the buffer pool), with
// the leaves it needs in bufs.
void evaluate_pair_exit(const LoweredProgram& p, const Layout& L, int exit, const std::vector<bool>& fused,
                        std::vector<Buf>& bufs, const ComputeNode& compute);

}  // namespace kvevict::dsl::interp
