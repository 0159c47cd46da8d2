#pragma once
// KVzip's replay scores written from kvpress's definition in double precision (the reference of
// core/engine/replay_pass.h, shared by replay_pass_test.cpp and kvzip_policy_test.cpp): the naive
// double forward over context ++ replay (the replay's queries at positions S.., attending the whole
// context causally, as the replay against the cache does), each replay query's full-softmax
// probabilities renormalised over the subset kvpress's score_kvzip scores against (sinks, the chunk,
// the replay tokens up to the query): a different route to the same number.
#include <vector>

#include "core/engine/replay_pass.h"
#include "core/model/model.h"

namespace kvevict::test {

// kvpress's replay texts tokenised here, without BOS; the suffix "\n" (kvpress's default for a
// model without a chat template, as stories260K).
ReplayPrompt kvpress_test_prompt(const Tokenizer& tok);

// The reference scores [layer][query head][t] of `context` (the prompt, from position 0).
std::vector<std::vector<std::vector<double>>> reference_replay_scores(const Model& model, const std::vector<int>& context,
                                                                      const ReplayPrompt& prompt, const ReplayOptions& o);

}  // namespace kvevict::test
