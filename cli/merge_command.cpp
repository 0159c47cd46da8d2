// `kvevict merge OUT.db IN.db...`: joins the finished shard runs of one config and model into one
// whole run in OUT.db (evals/results_merge.h). Refusals (different configs or models, a missing,
// unfinished or conflicting shard, mixed shard counts) exit 2 with OUT untouched; merging the same
// shards into the same OUT again changes nothing.
#include <iostream>

#include "cli/command.h"
#include "evals/results_merge.h"

namespace {

struct MergeArgs {
  std::string out;
  std::vector<std::string> inputs;
};

std::function<int()> setup_merge(CLI::App& app) {
  auto args = std::make_shared<MergeArgs>();
  app.add_option("out", args->out, "Output results database (created when absent; other runs in it are kept)")
      ->required();
  app.add_option("inputs", args->inputs, "Results databases holding the shard runs (kvevict eval --shard I/N)")
      ->required();
  return [args] {
    using namespace kvevict::evals;
    auto note = [](const std::string& text) { std::cerr << "kvevict: " << text << "\n"; };
    const MergeSummary summary = merge_results(args->out, args->inputs, note);
    const std::string what = std::to_string(summary.shards) + " shard" + (summary.shards == 1 ? "" : "s") + " of '" +
                             summary.name + "' (" + std::to_string(summary.results) + " results)";
    switch (summary.outcome) {
      case MergeSummary::Outcome::Unchanged:
        std::cerr << "kvevict: " << args->out << " already holds run #" << summary.run_id << ", the merge of " << what
                  << "; nothing changed\n";
        break;
      case MergeSummary::Outcome::Completed:
        std::cerr << "kvevict: completed the interrupted merge run #" << summary.run_id << " of " << what << " in "
                  << args->out << "\n";
        break;
      case MergeSummary::Outcome::Merged:
        std::cerr << "kvevict: merged " << what << " into " << args->out << " as run #" << summary.run_id << "\n";
        break;
    }
    return 0;
  };
}

KVEVICT_COMMAND("merge", "Join the shard runs of one config and model (eval --shard) into one whole run", setup_merge, 13);

}  // namespace
