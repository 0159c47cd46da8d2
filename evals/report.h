#pragma once
// `kvevict report`: writes into `out_dir` an index.html that a browser opens from disk, with
//  - a provenance table: per run shown, its name, model path and SHA-256, kvevict version and git
//    commit, config hash, start and finish time, device, scoring backend (jit/scoring_backend.h)
//    and prefill attention (core/decode/decoder.h);
//  - a policies table: per leaderboard name its file or name, the SHA-256 of its source text with
//    its resolved parameters, and those parameters (evals/stored_content.h);
//  - per (model, task): the leaderboard (score [95% interval], paired difference to full, mean over
//    compressed budgets, iso-quality budget, n), KV-cache bytes in binary units (and, where some
//    cell measured it, what the device held: aggregates.device_kv_bytes) and decode speed;
//  - per (model, task) one SVG of score against the measured kept fraction of the cache (log x
//    axis, one line per policy, interval bands) and one of iso-quality bars;
//  - depth x length heatmaps per (policy, budget), only where the grid has more than one cell and
//    its scores are not all equal (the others are named in one line).
#include <string>
#include <vector>

#include "evals/results_store.h"
#include "evals/stats_iso_quality.h"

namespace kvevict::evals {

struct ReportFiles {
  std::string index;
  std::vector<std::string> svgs;
};

// Throws RuntimeError naming the folder or file that cannot be written.
ReportFiles write_report(ResultsStore& store, const std::string& out_dir, double iso_threshold = kDefaultIsoThreshold);

}  // namespace kvevict::evals
