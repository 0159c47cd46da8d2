#include "evals/runner.h"

#include <map>
#include <optional>

#include "core/decode/make_decoder.h"
#include "core/util/error.h"
#include "evals/metrics/metrics.h"
#include "evals/tasks/task.h"
#include "kvevict_version.h"

namespace kvevict::evals {
namespace {

std::string first_line(const std::string& text) {
  size_t start = text.find_first_not_of('\n');
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

std::vector<Sample> generate_samples(const EvalConfig& config, SampleRunner& runner) {
  TaskContext context;
  context.seed = config.seed;
  context.limit = config.limit;
  context.count_tokens = [&runner](std::string_view text) { return runner.count_tokens(text); };
  std::vector<Sample> all;
  for (const auto& task_config : config.tasks) {
    // Options were validated when the config was loaded; re-reading them cannot add errors.
    ConfigErrors errors(config.source, {});
    MapReader reader(errors, task_config.options, task_config.where);
    if (reader.has("type")) reader.get_string("type", task_config.type);
    auto task = find_task_type(task_config.type)->make(reader, task_config.name);
    errors.throw_if_any();
    auto samples = task->generate(context);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  return all;
}

// Every sample's prompt, question and answer must fit the model's context; a sample that does not
// would decode past the positions the model was trained for. UsageError at the task's `lengths`.
void check_samples_fit(const EvalConfig& config, SampleRunner& runner, const std::vector<Sample>& samples) {
  const int context = runner.context_length();
  if (context <= 0) return;
  ConfigErrors errors(config.source, config.overridden);
  for (const Sample& sample : samples) {
    const int needed = runner.positions_needed(sample);
    if (needed <= context) continue;
    for (const auto& task : config.tasks) {
      if (task.name != sample.task) continue;
      YAML::Node at = task.options.IsMap() && task.options["lengths"] ? task.options["lengths"] : task.options;
      errors.error(at, task.where + ".lengths",
                   "sample " + sample.key + " needs " + std::to_string(needed) +
                       " positions (prompt, question and answer), more than the model's context of " +
                       std::to_string(context) + " tokens");
    }
  }
  errors.throw_if_any();
}

}  // namespace

std::vector<Sample> plan_samples(const EvalConfig& config, SampleRunner& runner) {
  runner.prepare(config.policies);
  std::vector<Sample> samples = generate_samples(config, runner);
  check_samples_fit(config, runner, samples);
  check_precision(config.precision, samples);  // of the whole config, before any shard is taken
  return samples;
}

double score_outcome(const Sample& sample, const RunOutcome& outcome, nlohmann::json& extra) {
  if (sample.fidelity) {
    extra["kl"] = outcome.kl;
    extra["top1_agreement"] = outcome.top1_agreement;
    extra["greedy_agreement"] = outcome.greedy_agreement;
    return 100.0 * outcome.top1_agreement;
  }
  std::string prediction = sample.first_line_only ? first_line(outcome.prediction) : outcome.prediction;
  extra["metric"] = sample.metric;
  return 100.0 * score_prediction(sample.metric, prediction, sample.references, sample.all_classes);
}

namespace {

// One stored row: the sample's identity and grid, the policy's outcome and its score.
SampleResult make_row(const Sample& sample, const PolicyChoice& policy, const Budget& budget, const RunOutcome& outcome,
                      const std::string& policy_hash, const std::string& prompt_hash) {
  nlohmann::json extra = outcome.extra;
  SampleResult row;
  row.policy_hash = policy_hash;
  row.prompt_hash = prompt_hash;
  row.score = score_outcome(sample, outcome, extra);
  row.task = sample.task;
  row.sample_key = sample.key;
  row.policy = policy.label;
  row.budget = budget.text;
  row.length = sample.length;
  row.depth = sample.depth;
  row.sample_index = sample.index;
  row.grid_json = sample.grid.dump();
  row.query_aware = sample.query_aware;
  row.prediction = outcome.prediction;
  row.reference = nlohmann::json(sample.references).dump();
  row.kept_ratio = outcome.kept_ratio;
  row.kv_bytes = outcome.kv_bytes;
  row.kv_bytes_full = outcome.kv_bytes_full;
  row.ttft_ms = outcome.ttft_ms;
  row.decode_tok_s = outcome.decode_tok_s;
  row.extra_json = extra.dump();
  return row;
}

// The first label whose content differs from the one a stored run used ("" when none does). Labels
// the run has no hash for (rows from before schema version 4, or none yet) are not a difference.
std::string changed_policy(const std::map<std::string, std::string>& stored,
                           const std::map<std::string, std::string>& current) {
  for (const auto& [label, hash] : stored) {
    auto now = current.find(label);
    if (now != current.end() && now->second != hash) return label;
  }
  return "";
}

// Whether `run` was scored the way `runner` scores. Runs from before the store recorded it ('')
// match any backend.
bool same_scoring(const RunRecord& run, const SampleRunner& runner) {
  return run.scoring.empty() || run.scoring == runner.scoring();
}

// Whether `run` decoded with the config's prefill attention. The key is hashed when written, so a
// run of this config hash differs only when a database was edited; checked all the same, since one
// run mixing two kernels' numerics would be a result no config describes.
bool same_prefill_attention(const RunRecord& run, const EvalConfig& config) {
  return run.prefill_attention == mode_name(config.prefill_attention);
}

// Whether `run` prefilled as this runner does (shared or per_run). Written keys are hashed, but auto
// resolves by device: one config hash runs per_run on a GPU and shared on a CPU, and the two evict
// from different prefills, so their results are not one run's.
bool same_prefill_mode(const RunRecord& run, const SampleRunner& runner) {
  return run.prefill == mode_name(runner.prefill_mode());
}

RunRecord new_run_record(const EvalConfig& config, SampleRunner& runner, const std::string& model_hash,
                         const std::string& shard) {
  RunRecord record;
  record.name = config.name;
  record.config_hash = config.hash;
  record.config_yaml = config.resolved_yaml;
  record.kvevict_version = KVEVICT_VERSION;
  record.git_commit = KVEVICT_GIT_COMMIT;
  record.model = config.model;
  record.model_hash = model_hash;
  record.device = runner.device();
  record.scoring = runner.scoring();
  record.prefill_attention = std::string(mode_name(config.prefill_attention));
  record.prefill = std::string(mode_name(runner.prefill_mode()));  // resolved: shared or per_run
  record.seed = config.seed;
  record.shard = shard;
  return record;
}

// Skips an identical finished run (summary.skipped), claims the unfinished one to resume
// (summary.resumed), or creates a new run; sets summary.run_id. The content of the policies (by
// label), the scoring backend and the prefill attention are part of "identical": a run that
// differs in one is neither skipped nor resumed.
void open_run(const EvalConfig& config, SampleRunner& runner, ResultsStore& store, const EvalOptions& options,
              const std::map<std::string, std::string>& policy_hash, EvalSummary& summary) {
  auto note = [&](const std::string& text) {
    if (options.note) options.note(text);
  };
  // Why a stored run of this config and model is not this run ("" when it is).
  auto differs = [&](const RunRecord& run) -> std::string {
    if (!same_scoring(run, runner)) return "was scored by " + run.scoring + ", this one scores by " + runner.scoring();
    if (!same_prefill_attention(run, config)) {
      return "ran the " + run.prefill_attention + " prefill attention, this one runs " +
             std::string(mode_name(config.prefill_attention));
    }
    if (!same_prefill_mode(run, runner)) {
      return "ran the " + run.prefill + " prefill, this one runs " + std::string(mode_name(runner.prefill_mode()));
    }
    const std::string changed = changed_policy(store.run_policy_hashes(run.id), policy_hash);
    return changed.empty() ? "" : "ran another version of policy '" + changed + "'";
  };
  const std::string model_hash = runner.model_hash();
  if (!options.force) {
    if (auto finished = store.find_run(config.hash, model_hash, "finished", options.shard)) {
      const std::string difference = differs(*finished);
      if (difference.empty()) {
        summary.run_id = finished->id;
        summary.skipped = true;
        note("run #" + std::to_string(finished->id) + " of this config and model finished at " +
             finished->finished_at + "; skipping (use --force to run it again)");
        return;
      }
      note("run #" + std::to_string(finished->id) + " of this config " + difference + "; running again");
    }
  }
  std::optional<RunRecord> unfinished = store.find_run(config.hash, model_hash, "unfinished", options.shard);
  if (options.resume && unfinished) {  // one run: one backend, one prefill kernel, one version of each policy
    if (const std::string difference = differs(*unfinished); !difference.empty()) {
      note("run #" + std::to_string(unfinished->id) + " " + difference + "; starting a new run instead of resuming it");
      unfinished.reset();
    }
  }
  if (options.resume && unfinished) {
    summary.run_id = unfinished->id;
    summary.resumed = true;
    store.claim_run(unfinished->id);  // a second concurrent --resume stops here, with the first one's pid
    return;
  }
  if (options.resume) note("no unfinished run of this config to resume; starting a new one");
  else if (unfinished) note("run #" + std::to_string(unfinished->id) + " of this config is unfinished; --resume continues it");
  summary.run_id = store.create_run(new_run_record(config, runner, model_hash, options.shard));
}

// The results of `sample` still missing from the run (not in `done`), run and stored together with
// its prompt in one transaction; how many were written.
int64_t run_sample(const Sample& sample, const EvalConfig& config, SampleRunner& runner, ResultsStore& store,
                   int64_t run_id, const std::set<std::string>& done,
                   const std::map<std::string, std::string>& policy_hash) {
  std::vector<std::pair<const PolicyChoice*, const Budget*>> missing;
  for (const auto& policy : config.policies)
    for (const auto& budget : config.budgets)
      if (!done.count(ResultsStore::result_key(sample.task, sample.key, policy.label, budget.text)))
        missing.push_back({&policy, &budget});
  if (missing.empty()) return 0;
  // The text built here is the text prefilled and the text stored: a replay feeds it back.
  const PromptText text = runner.prompt_text(sample);
  const StoredPrompt prompt = make_stored_prompt(sample, text);
  runner.begin_prompt(sample, text);
  std::vector<SampleResult> rows;
  // The full cache is the restored prefill whatever the policy (nothing is evicted, no observer
  // runs): it is decoded once per sample and its outcome stored under every policy's `full`.
  std::optional<RunOutcome> full_cache;
  for (const auto& [policy, budget] : missing) {
    if (budget->kind == Budget::Kind::Full) {
      if (!full_cache) full_cache = runner.run(*policy, *budget);
      rows.push_back(make_row(sample, *policy, *budget, *full_cache, policy_hash.at(policy->label), prompt.hash));
      continue;
    }
    RunOutcome outcome = runner.run(*policy, *budget);
    rows.push_back(make_row(sample, *policy, *budget, outcome, policy_hash.at(policy->label), prompt.hash));
  }
  store.insert_results(run_id, rows, {prompt});
  return static_cast<int64_t>(rows.size());
}

}  // namespace

EvalSummary run_eval(const EvalConfig& config, SampleRunner& runner, ResultsStore& store, const EvalOptions& options) {
  auto note = [&](const std::string& text) {
    if (options.note) options.note(text);
  };
  EvalSummary summary;
  // Policies load and samples are generated (and checked against the model's context) before the
  // run is recorded: nothing is written for a run that cannot start.
  const std::vector<Sample> samples = options.samples ? *options.samples : plan_samples(config, runner);
  // The config names its policies; their content (the file's text, resolved parameters) is part of
  // what a run measured.
  std::vector<PolicySource> sources;
  std::map<std::string, std::string> policy_hash;  // by label
  for (const auto& policy : config.policies) {
    sources.push_back(runner.policy_source(policy));
    policy_hash[policy.label] = sources.back().hash;
  }
  open_run(config, runner, store, options, policy_hash, summary);
  if (summary.skipped) return summary;

  // From here on a failure marks the run failed with the reason; --resume continues it.
  auto fail = [&](const std::string& reason) {
    try {
      store.finish_run(summary.run_id, "failed", reason);
    } catch (const std::exception&) {
      // The database itself is what failed (disk full, read-only): the run stays "running", its
      // committed samples intact, and --resume continues it all the same.
    }
  };
  std::optional<Progress> progress;
  try {
    store.insert_policies(sources);  // once per content; the results name them by hash
    summary.samples = static_cast<int64_t>(samples.size());
    const int64_t per_sample = static_cast<int64_t>(config.policies.size() * config.budgets.size());
    summary.results_total = summary.samples * per_sample;
    std::set<std::string> done = store.completed_keys(summary.run_id);
    if (summary.resumed) {
      note("resuming run #" + std::to_string(summary.run_id) + ": " + std::to_string(done.size()) + " of " +
           std::to_string(summary.results_total) + " results already stored");
    }

    const int64_t prefills_before = runner.prefill_count(), run_prefills_before = runner.run_prefill_count();
    progress.emplace(options.progress, config.name, summary.results_total, static_cast<int64_t>(done.size()));
    for (const Sample& sample : samples) {
      const int64_t written = run_sample(sample, config, runner, store, summary.run_id, done, policy_hash);
      if (written == 0) continue;  // every result of the sample was stored already (--resume)
      summary.results_written += written;
      progress->advance(written);
    }
    progress->finish();
    summary.prefills = runner.prefill_count() - prefills_before;
    summary.run_prefills = runner.run_prefill_count() - run_prefills_before;
    store.update_aggregates(summary.run_id);
    store.finish_run(summary.run_id, "finished");
  } catch (const std::exception& e) {
    if (progress) progress->finish();
    fail(e.what());  // what was committed stays
    throw;
  }
  return summary;
}

}  // namespace kvevict::evals
