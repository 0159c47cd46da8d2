#pragma once
// Which combinations of the chunk and segment settings (PolicySelect::unit / chunk / chunk_score /
// quota, PolicyObserve::segment, the A_seg signal) the engine supports. One list, read by the
// policy-file loader (dsl/policy_file.cpp reports each at its key's line and column) and by the
// engine for hand-built descriptions (engine_checks.cpp throws the first).
//
// Why these limits: chunks and segments are ranges of prompt positions, decided once at prefill on
// the full prompt. A decode trigger, a prefill in blocks or a cascading re-selection would run the rule again on a cache
// whose chunks are already cut (and A_seg holds only the prompt's queries); GQA unfolding and the
// same_index_head map change which heads a chunk decision or A_seg's h axis belong to; the random
// share is a token-level draw; Ada-KV's layer scope moves budget between heads by
// token ranks. Unbounded work is impossible by construction (segment_observation.h states the
// bounds), so no limit is needed on the lengths beyond being whole numbers >= 1.
#include <string>
#include <vector>

#include "core/engine/policy_program.h"

namespace kvevict {

struct SettingError {
  std::string section;  // policy-file section ("select", "observe", "run", or a program key)
  std::string key;      // key inside it ("" for the section itself)
  std::string message;
};

std::vector<SettingError> segment_setting_errors(const PolicyDescription& d);

}  // namespace kvevict
