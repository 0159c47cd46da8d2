// `kvevict eval -c CONFIG.yaml [--db FILE] [--set key=value ...] [--resume] [--force] [--limit N] [--quiet]
//  [--shard I/N]`: validates the whole config (exit 2 on any problem, before any work), sweeps every task
// sample under every (policy, budget) into the SQLite store, then prints the run's leaderboard. With
// --shard only shard I of N of the planned samples runs (evals/shard.h) and the run is recorded as
// that shard; `kvevict merge` joins the shards into the whole run the leaderboard shows.
#include <iostream>
#include <optional>

#include "cli/command.h"
#include "evals/config.h"
#include "evals/leaderboard.h"
#include "evals/leaderboard_stats.h"
#include "evals/results_store.h"
#include "evals/runner.h"
#include "evals/sample_runner.h"
#include "evals/shard.h"

namespace {

struct EvalArgs {
  std::string config;
  std::string db = "kvevict.db";
  std::vector<std::string> overrides;
  bool resume = false;
  bool force = false;
  int limit = -1;
  bool quiet = false;
  std::string shard;
  CLI::Option* shard_option = nullptr;  // given at all (an empty --shard '' is refused, not ignored)
};

std::function<int()> setup_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  app.add_option("-c,--config", args->config, "Eval config (YAML)")->required();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--set", args->overrides, "Override a config key, e.g. --set tasks.passkey.lengths=[1024]")
      ->take_all()
      ->allow_extra_args(false);
  app.add_flag("--resume", args->resume, "Continue the newest unfinished run of this config");
  app.add_flag("--force", args->force, "Run even if an identical run already finished");
  app.add_option("--limit", args->limit, "At most N samples per grid point (smoke runs)")->check(CLI::NonNegativeNumber);
  app.add_flag("-q,--quiet", args->quiet, "No progress and no leaderboard on the terminal");
  args->shard_option = app.add_option("--shard", args->shard,
                 "Run only shard I of N of the samples (0-based I, as SLURM_ARRAY_TASK_ID); join with kvevict merge");
  return [args] {
    using namespace kvevict::evals;
    std::optional<ShardSpec> shard;  // checked first: a bad spec is refused before the model loads
    if (args->shard_option->count() > 0) shard = parse_shard(args->shard);
    LoadConfigOptions options;
    options.overrides = args->overrides;
    options.limit = args->limit;
    options.check_policy = check_policy_choice;
    EvalConfig config = load_eval_config(args->config, options);

    // The model and the policies load before the database is touched: nothing is recorded for a
    // run that cannot start.
    auto runner = make_sample_runner(config);
    check_config_for_model(config, runner->context_length());  // lengths that do not fit: exit 2
    std::vector<Sample> samples = plan_samples(config, *runner);  // every sample fits, or exit 2
    EvalOptions eval_options;
    if (shard) {
      const size_t planned = samples.size();
      samples = shard_samples(samples, *shard);
      eval_options.shard = shard->text();
      if (!args->quiet) {
        std::cerr << "kvevict: shard " << shard->text() << ": " << samples.size() << " of " << planned << " samples"
                  << (samples.empty() ? " (an empty shard: it records a finished run with no results)" : "") << "\n";
      }
    }
    ResultsStore store(args->db);
    eval_options.samples = &samples;
    eval_options.resume = args->resume;
    eval_options.force = args->force;
    eval_options.progress = Progress::detect(args->quiet);
    eval_options.note = [quiet = args->quiet](const std::string& text) {
      if (!quiet) std::cerr << "kvevict: " << text << "\n";
    };
    EvalSummary summary = run_eval(config, *runner, store, eval_options);
    if (!args->quiet) {
      if (!summary.skipped) {
        std::cerr << "kvevict: run #" << summary.run_id << " finished: " << summary.samples << " samples, "
                  << summary.results_written << " results written, " << summary.prefills << " full-cache prefills";
        // per_run (and block-prefill policies) prefill once per evicting run: their cost, shown.
        if (summary.run_prefills > 0) std::cerr << ", " << summary.run_prefills << " prefills by single runs";
        std::cerr << "\n";
      }
      if (shard) {  // a shard is a part: the leaderboard shows whole runs only
        std::cerr << "kvevict: run #" << summary.run_id << " is shard " << shard->text()
                  << "; join the shards with: kvevict merge OUT.db SHARD.db...\n";
        return 0;
      }
      // The same cells as `kvevict leaderboard`: n, intervals and the difference to full.
      std::cout << render_leaderboard(build_leaderboard(store.leaderboard("", "", summary.run_id), store_sample_scores(store)),
                                      LeaderboardFormat::Table);
    }
    return 0;
  };
}

KVEVICT_COMMAND("eval", "Evaluate policies x budgets on long-context tasks into the SQLite leaderboard", setup_eval, 10);

}  // namespace
