// `kvevict report [--db FILE] --out DIR [--iso-threshold F]`: SVG plots and an index.html from the results
// database (evals/report.h says what the page holds).
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
  double iso_threshold = kvevict::evals::kDefaultIsoThreshold;
};

std::function<int()> setup_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  app.add_option("--db", args->db, "Results database (SQLite)")->capture_default_str();
  app.add_option("--out", args->out, "Output folder")->required();
  app.add_option("--iso-threshold", args->iso_threshold,
                 "Share of the full-cache score the iso-quality budget keeps (0 < F <= 1)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  return [args] {
    if (!(args->iso_threshold > 0)) throw kvevict::UsageError("--iso-threshold: must be above 0");
    std::error_code unreadable;
    if (!std::filesystem::exists(args->db, unreadable)) throw kvevict::UsageError(args->db + ": no such results database");
    kvevict::evals::ResultsStore store(args->db);
    auto files = kvevict::evals::write_report(store, args->out, args->iso_threshold);
    std::cout << "wrote " << files.index << " and " << files.svgs.size() << " SVG plots\n";
    return 0;
  };
}

KVEVICT_COMMAND("report", "Write SVG plots and an HTML report from the results database", setup_report, 12);

}  // namespace
