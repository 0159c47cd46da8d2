#pragma once
// Which merge-on-evict settings the engine supports beyond the per-key checks of the policy file:
// one list, read by the policy-file loader (dsl/policy_file.cpp reports each at its key's line and
// column, as segment_setting_errors') and by the engine for hand-built descriptions
// (engine_checks.cpp throws the first).
//
// merge.method cam (merge_cam.h) merges at decode-time evictions only: its gate reads the attention
// accumulated over the decode steps (merge_state.h), which is empty at the prefill, so a prefill
// eviction would silently drop every entry unmerged (kvpress's CAMPress is a decoding press).
#include <vector>

#include "core/engine/policy_program.h"
#include "core/engine/segment_checks.h"

namespace kvevict {

std::vector<SettingError> merge_setting_errors(const PolicyDescription& d);

}  // namespace kvevict
