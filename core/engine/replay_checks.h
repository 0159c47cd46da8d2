#pragma once
// Which policies may read A_replay, KVzip's context-replay attention (core/engine/replay_pass.h).
// One list, read by the policy-file loader (each error at its key) and by the engine for
// hand-built descriptions (engine_checks.cpp throws the first).
//
// Why: the replay runs once, after the whole context is in the cache and before anything is
// evicted (replay_scores needs cache index = position), so it cannot follow a prefill in blocks,
// a cascading eviction after every layer or a decode trigger (the scores are the prefill's and
// are not kept). KVzip ranks entries across heads (kvpress: the whole model, or per layer when
// layerwise), so the selection is select.scope model or layer. observe.replay without a program
// that reads A_replay would run a second forward pass for nothing. A prompt within the budget is not
// replayed, so nothing may score after it either (layer_allocation budgets, a channel_score stage).
#include <vector>

#include "core/engine/policy_program.h"
#include "core/engine/segment_checks.h"

namespace kvevict {

std::vector<SettingError> replay_setting_errors(const PolicyDescription& d);

// Whether the policy's prefill waits for the replay's scores (it reads A_replay).
bool reads_replay(const PolicyDescription& d);

}  // namespace kvevict
