#include "core/engine/query_checks.h"

namespace kvevict {

bool reads_query_statistics(const PolicyDescription& d) {
  return d.needs(TensorSignal::QueryMean) || d.needs(TensorSignal::QueryCovariance);
}

std::vector<SettingError> query_setting_errors(const PolicyDescription& d) {
  std::vector<SettingError> out;
  const bool window_rows = d.needs(TensorSignal::WindowQueryRows) || d.needs(TensorSignal::WindowQueryRowsPreRope) ||
                           d.needs(TensorSignal::WindowOutputs);
  if (window_rows && d.observe.same_index_head)
    out.push_back({"observe", "same_index_head",
                   "Q, Q_pre and O run over the group's query heads; observe.same_index_head replaces A's heads only"});
  if (d.needs(TensorSignal::WindowQueryRowsPreRope) && d.run.reassign_positions && d.run.decode_every > 0)
    out.push_back({"run", "reassign_positions",
                   "Q_pre rotates window queries back by their original positions, which a decode-time query no "
                   "longer has once run.reassign_positions re-assigns them"});
  if (d.observe.window_after_token >= 0) {
    if (d.run.prefill_block > 0)
      out.push_back({"observe", "window_after_token",
                     "'window_after_token' finds the window in the whole prompt; it cannot be combined with "
                     "run.prefill_block"});
    if (d.observe.segment > 0)
      out.push_back({"observe", "window_after_token", "'window_after_token' cannot be combined with observe.segment"});
  }
  return out;
}

}  // namespace kvevict
