// `kvevict leaderboard [--db FILE] [--task T] [--model M] [--format table|md|csv|json] [--metric M]`.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/util/error.h"
#include "evals/leaderboard.h"
#include "evals/results_store.h"

namespace {

struct LeaderboardArgs {
  std::string db = "kvevict.db";
  std::string task, model, format = "table", metric = "score";
};

std::function<int()> setup_leaderboard(CLI::App& app) {
  auto args = std::make_shared<LeaderboardArgs>();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--task", args->task, "Only this task");
  app.add_option("--model", args->model, "Only runs whose model path contains this text");
  app.add_option("--format", args->format, "Output format")
      ->check(CLI::IsMember({"table", "md", "csv", "json"}))
      ->capture_default_str();
  app.add_option("--metric", args->metric, "Cell value for table/md: score, kv_bytes, kept_ratio, ttft_ms, decode_tok_s")
      ->check(CLI::IsMember({"score", "kv_bytes", "kept_ratio", "ttft_ms", "decode_tok_s"}))
      ->capture_default_str();
  return [args] {
    using namespace kvevict::evals;
    if (!std::filesystem::exists(args->db)) throw kvevict::UsageError(args->db + ": no such results database");
    ResultsStore store(args->db);
    LeaderboardFormat format = args->format == "md"    ? LeaderboardFormat::Markdown
                               : args->format == "csv" ? LeaderboardFormat::Csv
                               : args->format == "json" ? LeaderboardFormat::Json
                                                        : LeaderboardFormat::Table;
    std::cout << render_leaderboard(store.leaderboard(args->task, args->model), format, args->metric);
    return 0;
  };
}

KVEVICT_COMMAND("leaderboard", "Print the leaderboard from the results database", setup_leaderboard, 11);

}  // namespace
