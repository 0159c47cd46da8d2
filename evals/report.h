#pragma once
// `kvevict report`: writes into `out_dir` one SVG per (model, task) plotting score against budget
// (one line per policy), one needle heatmap (depth x length) per (model, task, policy, budget) for
// tasks with a depth grid, and index.html showing the leaderboard tables with the plots.
#include <string>
#include <vector>

#include "evals/results_store.h"

namespace kvevict::evals {

struct ReportFiles {
  std::string index;
  std::vector<std::string> svgs;
};

// Throws RuntimeError naming the folder or file that cannot be written.
ReportFiles write_report(ResultsStore& store, const std::string& out_dir);

}  // namespace kvevict::evals
