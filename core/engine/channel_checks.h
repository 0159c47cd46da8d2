#pragma once
// Which combinations the key-channel stage (channel_selection.h) supports: one list, read by the
// policy-file loader (dsl/policy_file.cpp reports each at its key's line and column) and by the
// engine for hand-built descriptions (engine_checks.cpp throws the first).
//
// The stage runs once, at the end of prefill, on the dense keys as cached and never again, so it
// needs a prefill run (run.prefill true) and refuses what would rewrite or re-group its keys:
//   select.unfold_gqa            one score per KV head, but the cache becomes one head per query head
//   run.reassign_positions       re-rotating a key by RoPE mixes a zeroed channel with its pair
//   merge.method codebook        codebook heads have no dense keys to zero
//   merge-on-evict (any other)   a merge averages zeroed into unpruned keys (no such rule in ThinK)
// and a prune fraction outside [0, 1).
#include <vector>

#include "core/engine/policy_program.h"
#include "core/engine/segment_checks.h"

namespace kvevict {

std::vector<SettingError> channel_setting_errors(const PolicyDescription& d);

}  // namespace kvevict
