#pragma once
// Which combinations of the query and model signals (Q, Q_pre, O, Q_mean, token, hidden_norm,
// out_norm; core/engine/query_signals.h, model_signals.h) and observe.window_after_token the
// engine supports. One list, read by the policy-file loader (each error at its key) and by the
// engine for hand-built descriptions (engine_checks.cpp throws the first).
//
// Why: Q, Q_pre and O run over the group's query heads, which observe.same_index_head replaces by
// one other head; Q_pre rotates a window query back by its original position, which is not the
// angle a decode-time query got once run.reassign_positions re-assigned the positions; a window
// found from the prompt's tokens needs the whole prompt at once (no run.prefill_block, no
// segments) and replaces observe.window.
#include <vector>

#include "core/engine/policy_program.h"
#include "core/engine/segment_checks.h"

namespace kvevict {

std::vector<SettingError> query_setting_errors(const PolicyDescription& d);

// Whether the policy reads the prompt query statistics (Q_mean, Q_cov).
bool reads_query_statistics(const PolicyDescription& d);

}  // namespace kvevict
