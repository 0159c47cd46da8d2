#pragma once
// Which combinations of the selection settings beyond fixed top-k (select.threshold,
// select.score_at, select.stages, select.scope: model, select.layer_allocation: mass) the engine
// supports. One list, read by the policy-file loader (dsl/policy_file.cpp reports each at its key's
// line and column) and by the engine for hand-built descriptions (engine_checks.cpp throws the first).
//
// Why these limits:
// * threshold: its memory bound is the budget (the cap), so run.decode_budget, which may grow with
//   the tokens generated, cannot be combined (decoding would grow without the --budget cap); it is a
//   per-token rule on one head's (or a layer_shared layer's) scores, so no random share, no chunk
//   rules, no Ada-KV / model pool, no unfolded GQA.
// * score_at insertion: frozen scores are kept aligned with one cache per KV head through every
//   compaction; a prefill in blocks would rescore old entries and unfolding changes the heads.
// * stages: each stage cuts a head once, at prefill, on the full prompt's observation.
// * scope model: one joint decision after every layer is prefilled; a cascade re-splits per layer
//   before the later layers exist, and decode triggers act one layer at a time.
#include <vector>

#include "core/engine/policy_program.h"
#include "core/engine/segment_checks.h"

namespace kvevict {

std::vector<SettingError> selection_setting_errors(const PolicyDescription& d);

}  // namespace kvevict
