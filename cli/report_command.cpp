// `kvevict report [--db FILE] --out DIR`: SVG plots and an index.html from the results database.
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "core/util/error.h"
#include "evals/report.h"
#include "evals/results_store.h"

namespace {

struct ReportArgs {
  std::string db = "kvevict.db";
  std::string out;
};

std::function<int()> setup_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--out", args->out, "Output folder")->required();
  return [args] {
    if (!std::filesystem::exists(args->db)) throw kvevict::UsageError(args->db + ": no such results database");
    kvevict::evals::ResultsStore store(args->db);
    auto files = kvevict::evals::write_report(store, args->out);
    std::cout << "wrote " << files.index << " and " << files.svgs.size() << " SVG plots\n";
    return 0;
  };
}

KVEVICT_COMMAND("report", "Write SVG plots and an HTML report from the results database", setup_report, 12);

}  // namespace
