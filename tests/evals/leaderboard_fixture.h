#pragma once
// A hand-made results database for the leaderboard, compare and report tests: one finished run,
// task passkey, 8 samples s0..s7, budgets 25% / 50% / 75% / full, three policies whose per-sample
// scores are chosen so every figure can be worked out by hand:
//   snap: 25% -> 100 on s0..s2 (3/8), 50% -> 100 on s0..s6 (7/8), 75% and full -> all 100
//   keep: every budget 100
//   odd:  25% -> 100, 50% and 75% -> 80 / 100 alternating (mean 90), full -> 100
// kept_ratio is the budget's fraction (1 for full); kv_bytes_full 9395973 (8.96 MiB).
#include <filesystem>
#include <string>
#include <unistd.h>

#include "evals/results_store.h"

namespace kvevict::test {

struct HandMadeDb {
  std::string path;
  std::filesystem::path dir;
  explicit HandMadeDb(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / ("kvevict_" + name + std::to_string(getpid()))) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    path = (dir / "hand.db").string();
    fill();
  }
  ~HandMadeDb() { std::filesystem::remove_all(dir); }

  static double score(const std::string& policy, const std::string& budget, int sample) {
    if (budget == "full" || policy == "keep") return 100;
    if (policy == "snap") return budget == "25%" ? (sample < 3 ? 100 : 0) : budget == "50%" ? (sample < 7 ? 100 : 0) : 100;
    return budget == "25%" ? 100 : (sample % 2 == 0 ? 80 : 100);  // odd
  }

 private:
  void fill() {
    evals::ResultsStore store(path);
    evals::RunRecord run;
    run.name = "hand";
    run.config_hash = "cfg0123456789abcdef";
    run.config_yaml = "name: hand\n";
    run.kvevict_version = "9.9.9";
    run.git_commit = "abc1234";
    run.model = "/models/tiny-model.gguf";
    run.model_hash = "feedface00112233";
    run.device = "cpu";
    run.scoring = "host";
    int64_t id = store.create_run(run);
    std::vector<evals::SampleResult> rows;
    const std::pair<const char*, double> budgets[] = {{"25%", 0.25}, {"50%", 0.5}, {"75%", 0.75}, {"full", 1.0}};
    for (const char* policy : {"snap", "keep", "odd"}) {
      for (const auto& [budget, fraction] : budgets) {
        for (int i = 0; i < 8; ++i) {
          evals::SampleResult r;
          r.task = "passkey";
          r.sample_key = "s" + std::to_string(i);
          r.policy = policy;
          r.budget = budget;
          r.length = 1024;
          r.score = score(policy, budget, i);
          r.kept_ratio = fraction;
          r.kv_bytes_full = 9395973;
          r.kv_bytes = static_cast<int64_t>(9395973 * fraction);
          r.reference = "[\"1\"]";
          rows.push_back(r);
        }
      }
    }
    store.insert_results(id, rows);
    store.update_aggregates(id);
    store.finish_run(id, "finished");
  }
};

}  // namespace kvevict::test
