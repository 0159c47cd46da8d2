// `kvevict replay RESULT_ID [--db FILE] [--json]`: re-runs one stored result (evals/replay.h) and
// prints the stored and replayed prediction and score, whether they are equal, and what the policy
// kept per layer and head (as `kvevict inspect` prints it). Exit 0 when the replay equals the
// stored result, 1 when it differs (the differing fields are named), 2 when the result cannot be
// replayed (unknown id, a row or database from before schema version 4, a changed model file).
// `kvevict replay --list RUN_ID` lists a run's result ids. The database is only read.
#include <iostream>

#include "cli/command.h"
#include "cli/eviction_report_output.h"
#include "core/util/error.h"
#include "evals/replay.h"
#include "evals/results_store.h"
#include "evals/sample_runner.h"

namespace {

using namespace kvevict::evals;

struct ReplayArgs {
  std::string db = "kvevict.db";
  int64_t result = 0, list_run = 0;
  bool json = false;
};

std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

void print_text(const ReplayReport& r) {
  std::cout << "result #" << r.stored.id << ": run #" << r.run.id << " (" << r.run.name << "), task " << r.stored.task
            << ", sample " << r.stored.sample_key << ", policy " << r.stored.policy << ", budget " << r.stored.budget
            << "\n";
  std::cout << "model " << r.run.model << " (SHA-256 " << r.run.model_hash << ", as stored)\n";
  std::cout << "policy source SHA-256 " << r.policy.hash << ", parameters " << r.policy.params_json << "\n";
  std::cout << "prompt SHA-256 " << r.prompt.hash;
  if (r.prompt_tokens >= 0) std::cout << ", " << r.prompt_tokens << " tokens prefilled";
  // The run's recorded mode is the replay's: per_run results come from the run's own prefill.
  std::cout << " (prefill " << r.run.prefill << ", as the run recorded)\n";
  const auto same = [&](const char* field) {
    for (const auto& d : r.differences) {
      if (d == field) return "DIFFERS";
    }
    return "equal";
  };
  std::cout << "prediction: stored " << quoted(r.stored.prediction) << ", replayed " << quoted(r.prediction) << " ("
            << same("prediction") << ")\n";
  std::cout << "score: stored " << r.stored.score << ", replayed " << r.score << " (" << same("score") << ")\n";
  std::cout << "kept ratio: stored " << r.stored.kept_ratio << ", replayed " << r.kept_ratio << " ("
            << same("kept_ratio") << ")\n";
  if (r.eviction) kvevict::cli::print_eviction_report(std::cout, *r.eviction, r.gqa_group);
  else std::cout << "full cache: nothing evicted\n";
  if (r.equal()) {
    std::cout << "replay equals the stored result\n";
  } else {
    std::string fields;
    for (const auto& d : r.differences) fields += (fields.empty() ? "" : ", ") + d;
    std::cout << "replay differs from the stored result: " << fields << "\n";
  }
}

nlohmann::json to_json(const ReplayReport& r) {
  nlohmann::json j = {{"result_id", r.stored.id},
                      {"run_id", r.run.id},
                      {"task", r.stored.task},
                      {"sample_key", r.stored.sample_key},
                      {"policy", r.stored.policy},
                      {"policy_hash", r.policy.hash},
                      {"prompt_hash", r.prompt.hash},
                      {"budget", r.stored.budget},
                      {"prefill", r.run.prefill},
                      {"stored", {{"prediction", r.stored.prediction}, {"score", r.stored.score},
                                  {"kept_ratio", r.stored.kept_ratio}}},
                      {"replayed", {{"prediction", r.prediction}, {"score", r.score}, {"kept_ratio", r.kept_ratio}}},
                      {"equal", r.equal()},
                      {"differences", r.differences}};
  j["eviction"] = r.eviction ? kvevict::cli::eviction_report_json(*r.eviction, r.gqa_group) : nlohmann::json(nullptr);
  return j;
}

int list_results(ResultsStore& store, int64_t run_id) {
  require_replay_schema(store, "run #" + std::to_string(run_id));
  if (!store.run(run_id)) throw kvevict::UsageError("run #" + std::to_string(run_id) + ": no such run in " + store.path());
  std::cout << "id\ttask\tsample\tpolicy\tbudget\tscore\treplayable\n";
  for (const auto& row : store.results(run_id)) {
    const bool replayable = !row.prompt_hash.empty() && !row.policy_hash.empty();
    std::cout << row.id << '\t' << row.task << '\t' << row.sample_key << '\t' << row.policy << '\t' << row.budget
              << '\t' << row.score << '\t' << (replayable ? "yes" : "no (before schema 4)") << "\n";
  }
  return 0;
}

std::function<int()> setup_replay(CLI::App& app) {
  auto args = std::make_shared<ReplayArgs>();
  auto* id = app.add_option("RESULT_ID", args->result, "Result to re-run (results.id; --list shows them)");
  auto* list = app.add_option("--list", args->list_run, "List the result ids of run RUN_ID instead")->excludes(id);
  id->excludes(list);
  app.add_option("--db", args->db, "Results database (SQLite), only read")->capture_default_str();
  app.add_flag("--json", args->json, "Print one JSON object");
  return [args, id, list] {
    if (id->count() == 0 && list->count() == 0) throw kvevict::UsageError("replay needs a RESULT_ID (or --list RUN_ID)");
    ResultsStore store(args->db, ResultsStore::Access::ReadOnly);
    if (list->count() > 0) return list_results(store, args->list_run);
    ReplayReport report = replay_result(store, args->result, make_sample_runner);
    if (args->json) std::cout << to_json(report).dump() << "\n";
    else print_text(report);
    return report.equal() ? 0 : 1;
  };
}

KVEVICT_COMMAND("replay", "Re-run one stored result and check it gives the stored prediction and score", setup_replay,
                14);

}  // namespace
