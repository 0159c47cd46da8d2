// The exponent of T in a generated kernel's work; see work_growth.h.
#include "jit/work_growth.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "jit/cuda_program_emitter.h"

namespace kvevict::jit {
namespace {

constexpr unsigned kTokenAxes = dsl::kAxisS | dsl::kAxisT;

// Loops over the tokens a node runs around one evaluation of its operand: the reduced s and t of
// a reduction, the pass over the tokens of a normalise (its divisor) and of a rank or sorted sum
// along s or t, two for a quantile along them (it counts ranks); a window's offsets are bounded.
int own_token_loops(const dsl::Node& n) {
  switch (n.op) {
    case dsl::NodeOp::Reduce: return std::popcount(n.axes & kTokenAxes);
    case dsl::NodeOp::Normalise: return 1;
    case dsl::NodeOp::Sort:
      if (!(n.axes & kTokenAxes)) return 0;
      return n.sort == dsl::SortFn::Quantile ? 2 : 1;
    default: return 0;
  }
}

}  // namespace

int token_work_exponent(const dsl::LoweredProgram& p, KernelOutput output) {
  const int n = static_cast<int>(p.nodes.size());
  if (p.output < 0 || p.output >= n) return 0;
  // in_thread[i]: the token loops nested in one evaluation of node i in a caller's thread (a staged
  // value is read from the scratch: none; a staged normalise reads its divisor there but still
  // evaluates its operand). Operands precede their nodes (lowered.h), so one pass in index order.
  std::vector<int> in_thread(static_cast<size_t>(n), 0), stage_cost(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const dsl::Node& node = p.nodes[static_cast<size_t>(i)];
    int operands = 0;
    for (int j : {node.a, node.b, node.c})
      if (j >= 0 && j < i) operands = std::max(operands, in_thread[static_cast<size_t>(j)]);
    const int own = own_token_loops(node) + operands;
    if (detail::is_staged(node)) {
      stage_cost[static_cast<size_t>(i)] = own;  // once per slot
      in_thread[static_cast<size_t>(i)] = node.op == dsl::NodeOp::Normalise ? operands : 0;
    } else {
      in_thread[static_cast<size_t>(i)] = own;
    }
  }
  // The stages the output reaches, and its threads: T of them for a token kernel.
  std::vector<bool> reached(static_cast<size_t>(n), false);
  reached[static_cast<size_t>(p.output)] = true;
  int k = in_thread[static_cast<size_t>(p.output)] + (output == KernelOutput::Token ? 1 : 0);
  for (int i = n - 1; i >= 0; --i) {
    if (!reached[static_cast<size_t>(i)]) continue;
    k = std::max(k, stage_cost[static_cast<size_t>(i)]);
    const dsl::Node& node = p.nodes[static_cast<size_t>(i)];
    for (int j : {node.a, node.b, node.c})
      if (j >= 0 && j < i) reached[static_cast<size_t>(j)] = true;
  }
  return k;
}

void refuse_unfinishable_work(const std::string& what, int k, int64_t T, int head_dim) {
  if (k <= 0 || T <= 1) return;
  const double work = std::pow(static_cast<double>(T), k) * std::max(1, head_dim);
  if (work <= kMostHeadWork) return;
  throw UsageError("policy '" + what + "': its generated kernel's work grows as T^" + std::to_string(k) +
                   " per head, about " + std::to_string(static_cast<long long>(work / 1e12)) +
                   "e12 operations per head at T = " + std::to_string(T) +
                   ", which would not finish; score it with the interpreter (--scoring interpreter, eval "
                   "scoring: interpreter), whose token-pair tiles are O(T^2)");
}

}  // namespace kvevict::jit
