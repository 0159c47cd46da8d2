#pragma once
// The sweep: every sample of every task, under every (policy, budget), into the results store.
// For each sample the model prefills once (SampleRunner::begin_sample); each (policy, budget) then
// restores that cache, evicts and decodes. A sample's results are committed together in one
// transaction, so a run killed at any moment loses at most the sample in flight and `--resume`
// redoes exactly what is missing (the store's unique key forbids duplicates).
// Every result names its policy and prompt by content hash; the policies' text and the prompts'
// text are stored once each (evals/stored_content.h), so `kvevict replay` can re-run any result.
// An identical finished run is skipped, and an unfinished one resumed, only while each policy it
// has results for has the same content (the file's text and resolved parameters) as now, and it
// was scored by the same backend and decoded with the same prefill attention (runs.scoring,
// runs.prefill_attention).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "evals/config.h"
#include "evals/progress.h"
#include "evals/results_store.h"
#include "evals/sample_runner.h"

namespace kvevict::evals {

struct EvalOptions {
  bool resume = false;  // continue the newest unfinished run of this config and model
  bool force = false;   // run even when an identical finished run exists
  Progress::Mode progress = Progress::Mode::Quiet;
  std::function<void(const std::string&)> note;  // one-line messages for the user
  // Samples from plan_samples (so a caller can validate before it opens the store); null: run_eval
  // plans them itself.
  const std::vector<Sample>* samples = nullptr;
  // "" or "I/N": the run covers shard I of N of the samples (the caller passes that shard's samples
  // in `samples`); recorded with the run, part of its identity for skip and --resume.
  std::string shard;
};

struct EvalSummary {
  int64_t run_id = 0;
  bool skipped = false;        // an identical finished run exists
  bool resumed = false;
  int64_t samples = 0;         // samples generated
  int64_t results_total = 0;   // samples x policies x budgets
  int64_t results_written = 0; // written by this invocation
  int64_t prefills = 0;        // full-cache prefills done by this invocation (one per sample run)
  // Prefills single (policy, budget) runs did for themselves: every evicting run's in per_run mode,
  // block-prefill policies' in either (SampleRunner::run_prefill_count).
  int64_t run_prefills = 0;
};

// Loads the policies into the runner, generates every task's samples and checks that each fits the
// model's context (prompt, question and answer), and that they can reach the config's `precision`.
// Throws UsageError at the task's `lengths` (or at `precision`).
std::vector<Sample> plan_samples(const EvalConfig& config, SampleRunner& runner);

EvalSummary run_eval(const EvalConfig& config, SampleRunner& runner, ResultsStore& store, const EvalOptions& options);

// Score of a prediction in 0-100 and the metric's details, per the sample's metric.
double score_outcome(const Sample& sample, const RunOutcome& outcome, nlohmann::json& extra);

}  // namespace kvevict::evals
