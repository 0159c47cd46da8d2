#include "evals/replay.h"

#include "core/util/error.h"
#include "evals/budget_text.h"
#include "evals/runner.h"

namespace kvevict::evals {
namespace {

std::string short_hash(const std::string& hash) { return hash.substr(0, 12); }

// The stored row with its prompt and policy, each checked against its hash. UsageError otherwise.
struct StoredParts {
  SampleResult row;
  RunRecord run;
  PolicySource policy;
  StoredPrompt prompt;
};

StoredParts load_stored(ResultsStore& store, int64_t id) {
  const std::string where = "result #" + std::to_string(id);
  require_replay_schema(store, where);
  auto row = store.result(id);
  if (!row) throw UsageError(where + ": no such result in the database");
  if (row->prompt_hash.empty() || row->policy_hash.empty()) {
    throw UsageError(where + " was written before results stored their prompt and policy source (schema "
                     "version 4): it cannot be replayed");
  }
  auto prompt = store.prompt(row->prompt_hash);
  if (!prompt) throw UsageError(where + ": its prompt " + short_hash(row->prompt_hash) + " is not in the database");
  if (prompt_content_hash(prompt->text, prompt->sample_json) != prompt->hash) {
    throw UsageError(where + ": the stored prompt " + short_hash(prompt->hash) + " does not match its hash (altered)");
  }
  auto policy = store.policy(row->policy_hash);
  if (!policy) throw UsageError(where + ": its policy " + short_hash(row->policy_hash) + " is not in the database");
  if (policy_content_hash(policy->text, policy->params_json) != policy->hash) {
    throw UsageError(where + ": the stored policy " + short_hash(policy->hash) + " does not match its hash (altered)");
  }
  auto run = store.run(row->run_id);
  if (!run) throw UsageError(where + ": its run #" + std::to_string(row->run_id) + " is not in the database");
  return {*row, *run, *policy, *prompt};
}

// The run's config reduced to the stored result's (policy, budget), the policy pinned to the
// stored text.
EvalConfig replay_config(const StoredParts& parts, const std::string& db) {
  EvalConfig config =
      parse_eval_config(parts.run.config_yaml, db + ": run #" + std::to_string(parts.run.id) + "'s stored config");
  std::optional<PolicyChoice> choice;
  for (const auto& policy : config.policies) {
    if (policy.label == parts.row.policy) choice = policy;
  }
  if (!choice) {
    throw UsageError("result #" + std::to_string(parts.row.id) + ": policy '" + parts.row.policy +
                     "' is not in its run's stored config");
  }
  choice->source = parts.policy.text;
  config.policies = {*choice};
  // Scored the way the run was (a cuda run replays on a GPU or is refused, never by another backend).
  if (!parts.run.scoring.empty()) config.scoring = parts.run.scoring;
  // Prefilled the way the run was: its recorded mode is resolved (shared or per_run), never auto,
  // so a per_run run from a GPU replays per_run on the CPU too. Any other text is an edited row.
  if (!parse_mode(parts.run.prefill, config.prefill) || config.prefill == PrefillMode::Auto) {
    throw UsageError("result #" + std::to_string(parts.row.id) + ": its run #" + std::to_string(parts.run.id) +
                     " records the prefill mode '" + parts.run.prefill + "' (expected shared or per_run)");
  }
  config.budgets = {parse_budget_text(parts.row.budget, "stored budget")};
  return config;
}

}  // namespace

void require_replay_schema(ResultsStore& store, const std::string& what) {
  const int version = store.schema_version();
  if (version >= 4) return;
  throw UsageError(what + ": " + store.path() + " has schema version " + std::to_string(version) +
                   ", from before results stored their prompt and policy source (version 4): nothing in it can be "
                   "replayed (any other kvevict command migrates it; results written after that can)");
}

ReplayReport replay_result(ResultsStore& store, int64_t result_id, const RunnerFactory& make_runner) {
  StoredParts parts = load_stored(store, result_id);
  EvalConfig config = replay_config(parts, store.path());
  auto runner = make_runner(config);
  const std::string model_hash = runner->model_hash();
  if (model_hash != parts.run.model_hash) {
    throw UsageError("result #" + std::to_string(result_id) + ": model " + config.model + " has changed since run #" +
                     std::to_string(parts.run.id) + " (SHA-256 now " + model_hash + ", stored " + parts.run.model_hash +
                     "); a replay on another model would not be a replay");
  }
  const PolicyChoice& choice = config.policies.front();
  runner->prepare(config.policies);
  const PolicySource now = runner->policy_source(choice);
  if (now.hash != parts.policy.hash) {
    throw UsageError("result #" + std::to_string(result_id) + ": the stored policy text of '" + choice.label +
                     "' resolves to other parameters now (" + now.params_json + ", stored " + parts.policy.params_json +
                     ")");
  }

  Sample sample = sample_from_stored(parts.prompt);
  sample.task = parts.row.task;
  sample.key = parts.row.sample_key;
  runner->begin_prompt(sample, parts.prompt.text);
  const RunOutcome outcome = runner->run(choice, config.budgets.front());
  nlohmann::json extra = outcome.extra;

  ReplayReport report;
  report.score = score_outcome(sample, outcome, extra);
  report.prediction = outcome.prediction;
  report.kept_ratio = outcome.kept_ratio;
  if (outcome.extra.contains("prompt_tokens")) report.prompt_tokens = outcome.extra["prompt_tokens"].get<int64_t>();
  if (const EvictionReport* kept = runner->eviction_report()) report.eviction = *kept;
  report.gqa_group = runner->gqa_group();

  if (report.prediction != parts.row.prediction) report.differences.push_back("prediction");
  if (report.score != parts.row.score) report.differences.push_back("score");
  if (report.kept_ratio != parts.row.kept_ratio) report.differences.push_back("kept_ratio");
  const nlohmann::json stored_extra = nlohmann::json::parse(parts.row.extra_json, nullptr, false);
  if (report.prompt_tokens >= 0 && stored_extra.is_object() && stored_extra.contains("prompt_tokens") &&
      stored_extra["prompt_tokens"] != report.prompt_tokens) {
    report.differences.push_back("prompt_tokens");
  }
  report.stored = std::move(parts.row);
  report.run = std::move(parts.run);
  report.policy = std::move(parts.policy);
  report.prompt = std::move(parts.prompt);
  return report;
}

}  // namespace kvevict::evals
