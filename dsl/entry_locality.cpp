#include "dsl/entry_locality.h"

namespace kvevict::dsl {
namespace {

constexpr unsigned kTokenAxes = kAxisS | kAxisT;

bool node_is_entry_local(const Node& n) {
  if (n.shape & kAxisS) return false;  // a token pair, or t renamed to s: another entry's values
  switch (n.op) {
    case NodeOp::Scalar:
      return n.scalar != ScalarSignal::T && n.scalar != ScalarSignal::W;
    case NodeOp::Load:
      return source_made_per_entry(signal_info(n.tensor).source);
    case NodeOp::AxisIndex:
    case NodeOp::Reduce:
    case NodeOp::Sort:
      return (n.axes & kTokenAxes) == 0;
    case NodeOp::Window:     // along t
    case NodeOp::Normalise:  // over t
      return false;
    case NodeOp::Const:
    case NodeOp::Random:  // keyed by the entry's own position
    case NodeOp::Unary:
    case NodeOp::Binary:
    case NodeOp::Select:
    case NodeOp::Table:
    case NodeOp::Rename:
    case NodeOp::Inverse:  // over channel axes, never a token axis (lowered.h)
    case NodeOp::Randn:
      return true;
  }
  return false;
}

}  // namespace

bool scores_each_entry_alone(const LoweredProgram& program) {
  if (program.output < 0) return false;
  for (const Node& n : program.nodes)
    if (!node_is_entry_local(n)) return false;
  return true;
}

}  // namespace kvevict::dsl
