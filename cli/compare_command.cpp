// `kvevict compare A B [--db FILE] [--task T] [--model M] [--format table|json]`: the paired
// difference of policy A against policy B per task and budget on the samples both were scored on.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/util/error.h"
#include "evals/results_store.h"
#include "evals/stats_compare.h"

namespace {

struct CompareArgs {
  std::string db = "kvevict.db";
  std::string a, b, task, model, format = "table";
};

std::function<int()> setup_compare(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  app.add_option("A", args->a, "Policy (leaderboard name: snapkv, or snapkv@3f2a91 where one name has several contents)")
      ->required();
  app.add_option("B", args->b, "Policy to compare against")->required();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--task", args->task, "Only this task");
  app.add_option("--model", args->model, "Only runs whose model path contains this text");
  app.add_option("--format", args->format, "Output format")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  return [args] {
    using namespace kvevict::evals;
    std::error_code unreadable;
    if (!std::filesystem::exists(args->db, unreadable)) throw kvevict::UsageError(args->db + ": no such results database");
    if (args->a == args->b) throw kvevict::UsageError(args->a + ": compare needs two different policies");
    ResultsStore store(args->db);
    auto comparisons = compare_policies(store.leaderboard(args->task, args->model), store_sample_scores(store),
                                        args->a, args->b);
    std::cout << (args->format == "json" ? render_comparison_json(comparisons, args->a, args->b)
                                         : render_comparison_table(comparisons, args->a, args->b));
    return 0;
  };
}

KVEVICT_COMMAND("compare", "Paired difference of two policies per task and budget, with 95% intervals", setup_compare,
                13);

}  // namespace
