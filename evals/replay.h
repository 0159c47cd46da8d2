#pragma once
// `kvevict replay RESULT_ID`: re-runs one stored result from what the results store kept (the run's
// resolved config, the policy's source text, the prompt's text; evals/stored_content.h) and says
// whether the replay gives the stored prediction, score and kept fraction. The database is opened
// read-only: nothing is written whatever happens.
//
// Checked before anything runs, each refusal a UsageError (exit 2) naming what is wrong:
//  - the result id exists; the database has schema version 4 or later and the row names a stored
//    prompt and policy (rows written before version 4 do not: they display, but cannot be replayed);
//  - the stored prompt's and policy's hashes match their content (an altered row is refused);
//  - the run's config still parses (its model file exists) and the model's SHA-256 is the one the
//    run recorded (a changed model file is refused, naming both hashes);
//  - the stored policy text, compiled with the run's parameters, resolves to the stored hash.
// Then that one (policy, budget) runs on the stored prompt exactly as the sweep ran it: one
// full-cache prefill and the eviction of its copy (or, for a run that recorded the per_run prefill
// mode, the run's own prefill under its policy), the question tail, greedy decoding, the metric.
// A run's recorded prefill mode (runs.prefill) is the replay's, whatever device replays it.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "evals/results_store.h"
#include "evals/sample_runner.h"

namespace kvevict::evals {

struct ReplayReport {
  SampleResult stored;
  RunRecord run;
  PolicySource policy;
  StoredPrompt prompt;
  std::string prediction;  // the replay's
  double score = 0, kept_ratio = 0;
  int64_t prompt_tokens = -1;  // prefilled tokens (RunOutcome extra), -1 when the runner has none
  std::optional<EvictionReport> eviction;  // what the policy kept (absent for the full budget)
  int gqa_group = 1;
  // What differs from the stored row: "prediction", "score", "kept_ratio", "prompt_tokens".
  std::vector<std::string> differences;
  bool equal() const { return differences.empty(); }
};

using RunnerFactory = std::function<std::unique_ptr<SampleRunner>(const EvalConfig&)>;

// `store` is opened read-only (ResultsStore::Access::ReadOnly) by the caller.
ReplayReport replay_result(ResultsStore& store, int64_t result_id, const RunnerFactory& make_runner);

// UsageError starting with `what` when the database predates schema version 4 (no result in it
// stores its prompt and policy source).
void require_replay_schema(ResultsStore& store, const std::string& what);

}  // namespace kvevict::evals
