// `kvevict leaderboard [--db FILE] [--task T] [--model M] [--format table|md|csv|json] [--metric M]
//                      [--sort mean|iso] [--iso-threshold F]`.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/util/error.h"
#include "evals/leaderboard.h"
#include "evals/results_store.h"

namespace {

struct LeaderboardArgs {
  std::string db = "kvevict.db";
  std::string task, model, format = "table", metric = "score", sort = "mean";
  double iso_threshold = kvevict::evals::kDefaultIsoThreshold;
};

std::function<int()> setup_leaderboard(CLI::App& app) {
  auto args = std::make_shared<LeaderboardArgs>();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--task", args->task, "Only this task");
  app.add_option("--model", args->model, "Only runs whose model path contains this text");
  app.add_option("--format", args->format, "Output format")
      ->check(CLI::IsMember({"table", "md", "csv", "json"}))
      ->capture_default_str();
  const std::vector<std::string> metrics = kvevict::evals::metric_names();
  std::string metric_help = "Cell value for table/md:";
  for (size_t i = 0; i < metrics.size(); ++i) {
    metric_help += i ? ", " : " ";
    metric_help += metrics[i];
  }
  app.add_option("--metric", args->metric, metric_help + " (device_kv_bytes: CUDA runs only, '-' elsewhere)")
      ->check(CLI::IsMember(metrics))
      ->capture_default_str();
  app.add_option("--sort", args->sort, "Row order: mean (best mean over compressed budgets) or iso (smallest "
                                       "iso-quality budget first)")
      ->check(CLI::IsMember({"mean", "iso"}))
      ->capture_default_str();
  app.add_option("--iso-threshold", args->iso_threshold,
                 "Share of the full-cache score the iso-quality budget keeps (0 < F <= 1)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  return [args] {
    using namespace kvevict::evals;
    if (!(args->iso_threshold > 0)) throw kvevict::UsageError("--iso-threshold: must be above 0");
    std::error_code unreadable;
    if (!std::filesystem::exists(args->db, unreadable)) throw kvevict::UsageError(args->db + ": no such results database");
    ResultsStore store(args->db);
    LeaderboardFormat format = args->format == "md"    ? LeaderboardFormat::Markdown
                               : args->format == "csv" ? LeaderboardFormat::Csv
                               : args->format == "json" ? LeaderboardFormat::Json
                                                        : LeaderboardFormat::Table;
    LeaderboardOptions options;
    options.metric = *parse_leaderboard_metric(args->metric);  // CLI::IsMember checked the name
    options.sort = args->sort == "iso" ? LeaderboardSort::Iso : LeaderboardSort::Mean;
    options.iso_threshold = args->iso_threshold;
    auto groups = build_leaderboard(store.leaderboard(args->task, args->model), store_sample_scores(store),
                                    args->iso_threshold);
    std::cout << render_leaderboard(groups, format, options);
    return 0;
  };
}

KVEVICT_COMMAND("leaderboard", "Print the leaderboard from the results database", setup_leaderboard, 11);

}  // namespace
