#pragma once
// Helpers of the tests that sweep the fake model into a results database and look at how a run is
// recorded (prefill_attention_eval_test.cpp, prefill_mode_eval_test.cpp): run a config, plant a
// run as an earlier process (or another machine) left it, edit a database behind the store's back.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "evals/results_store.h"
#include "evals/runner.h"
#include "evals/shard.h"
#include "old_schema_db.h"

namespace kvevict::evals::test {

// A config as it was written before the eval's optional keys (prefill_attention, prefill) existed:
// its hash (from the kvevict before them, `kvevict eval` on this text) must not change.
inline const std::string kGolden =
    "name: golden\n"
    "model: \"fake:\"\n"
    "seed: 7\n"
    "tasks:\n"
    "  passkey: {lengths: [60], samples: 1}\n"
    "policies: [alpha]\n"
    "budgets: [\"20%\", full]\n";
inline constexpr const char* kGoldenHash = "cc738c3a385d6a6fa77e950ca5a9172a92ba30e9f6c88486c66a17411139d3c0";

// kGolden with `extra` lines after it (line 8 on), as golden.yaml.
inline EvalConfig parse_golden(const std::string& extra, const LoadConfigOptions& options = {}) {
  return parse_eval_config(kGolden + extra, "golden.yaml", options);
}

// The message of the kvevict::Error `f` throws (with its exit code), or "" when it throws none.
template <typename F>
std::pair<std::string, int> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.what(), e.exit_code()};
  }
  return {"", 0};
}

// Runs one SQL statement on the database file `db` (an edit no kvevict command would make).
inline void sql(const std::string& db, const std::string& statement) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  exec_sql(handle, statement);
  sqlite3_close(handle);
}

// Runs `config` on the fake model (its `prefill:` mode passed on, as the runner factory does) into
// `db`: shard `spec` ("" = every sample), notes into `notes`, --resume when `resume`.
inline EvalSummary run_fake(const EvalConfig& config, const std::string& db, const std::string& spec = "",
                            std::vector<std::string>* notes = nullptr, bool resume = false) {
  FakeRunner runner(config.model, config.prefill);
  ResultsStore store(db);
  std::vector<Sample> samples = plan_samples(config, runner);
  EvalOptions options;
  if (!spec.empty()) {
    samples = shard_samples(samples, parse_shard(spec));
    options.shard = spec;
  }
  options.samples = &samples;
  options.resume = resume;
  if (notes) options.note = [notes](const std::string& n) { notes->push_back(n); };
  return run_eval(config, runner, store, options);
}

// The record of a run of `config` on the fake model, for a test to change one field of and plant.
inline RunRecord fake_run_record(const EvalConfig& config) {
  FakeRunner runner(config.model);
  RunRecord run;
  run.name = config.name;
  run.config_hash = config.hash;
  run.config_yaml = config.resolved_yaml;
  run.model = config.model;
  run.model_hash = runner.model_hash();
  run.device = runner.device();
  return run;
}

// Stores `run` as an earlier process left it: `status` finished, or failed ("interrupted").
inline int64_t plant_run(const std::string& db, const RunRecord& run, const std::string& status) {
  ResultsStore store(db);
  const int64_t id = store.create_run(run);
  store.finish_run(id, status, status == "failed" ? "interrupted" : "");
  return id;
}

inline bool any_contains(const std::vector<std::string>& notes, const std::string& text) {
  for (const auto& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
}

inline std::string file_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace kvevict::evals::test
