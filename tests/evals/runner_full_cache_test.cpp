// The sweep decodes the full cache once per sample, not once per policy: with nothing evicted the
// outcome cannot depend on the policy, and every policy's `full` row holds that one outcome.
#include <gtest/gtest.h>

#include <map>

#include "evals/config.h"
#include "evals/fake_runner.h"
#include "evals/runner.h"
#include "temp_db.h"

using namespace kvevict::evals;
using kvevict::evals::test::TempDb;

namespace {

// Counts the runs per budget text.
class CountingRunner : public FakeRunner {
 public:
  CountingRunner() : FakeRunner("fake:") {}
  RunOutcome run(const PolicyChoice& policy, const kvevict::Budget& budget) override {
    ++runs[budget.text];
    return FakeRunner::run(policy, budget);
  }
  std::map<std::string, int> runs;
};

}  // namespace

TEST(RunnerFullCache, TheFullCacheIsDecodedOncePerSampleAndStoredForEveryPolicy) {
  TempDb db("runner_full_once");
  EvalConfig config = parse_eval_config(
      "model: \"fake:\"\nseed: 2\ntasks:\n  passkey: {lengths: [60, 120], samples: 2}\n"
      "policies: [alpha, beta, gamma]\nbudgets: [\"20%\", full]\n",
      "cfg.yaml");
  ResultsStore store(db.path);
  CountingRunner runner;
  EvalSummary summary = run_eval(config, runner, store, {});
  ASSERT_EQ(summary.samples, 4);
  EXPECT_EQ(runner.runs["full"], 4);       // once per sample, not 3 x 4
  EXPECT_EQ(runner.runs["20%"], 3 * 4);    // every policy evicts
  EXPECT_EQ(summary.results_written, 4 * 3 * 2);
  std::map<std::string, std::vector<SampleResult>> full_by_sample;
  for (const auto& row : store.results(summary.run_id)) {
    if (row.budget == "full") full_by_sample[row.sample_key].push_back(row);
  }
  ASSERT_EQ(full_by_sample.size(), 4u);
  for (const auto& [key, rows] : full_by_sample) {
    ASSERT_EQ(rows.size(), 3u) << key;
    for (const auto& row : rows) {
      EXPECT_EQ(row.prediction, rows[0].prediction);
      EXPECT_EQ(row.score, rows[0].score);
      EXPECT_EQ(row.kv_bytes, row.kv_bytes_full);
    }
  }
}
