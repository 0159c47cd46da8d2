// A policy that prefills in blocks (run.prefill_block) in an eval sweep: the shared full-cache
// prefill cannot stand in for it, so it runs its own chunked prefill per (sample, budget); its cache
// ends at the budget like any other policy's, and the others still share one prefill per sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <unistd.h>

#include "evals/config.h"
#include "evals/runner.h"
#include "evals/sample_runner.h"
#include "../core/test_models.h"

using namespace kvevict;
using namespace kvevict::evals;

TEST(BlockPrefillEval, ABlockPolicyRunsItsOwnPrefillAndEndsAtItsBudget) {
  if (auto reason = test::stories_missing_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const std::string text = "name: blocks\n"
                           "model: " + test::stories_checkpoint() + "\n"
                           "tokenizer: " + test::stories_tokenizer() + "\n"
                           "device: cpu\n"
                           "seed: 2\n"
                           "threads: 1\n"
                           "tasks:\n"
                           "  passkey: {lengths: [160], depths: [50], samples: 2}\n"
                           "policies: [knorm, {policy: blockpress, label: blocks, params: {block_size: 16, inner: knorm}}]\n"
                           "budgets: [full, \"24\"]\n";
  const EvalConfig config = parse_eval_config(text, "blocks.yaml");
  auto runner = make_sample_runner(config);
  const auto db = std::filesystem::temp_directory_path() / ("block_eval" + std::to_string(getpid()) + ".db");
  std::filesystem::remove(db);
  {
    ResultsStore store(db.string());
    const EvalSummary summary = run_eval(config, *runner, store, {});
    EXPECT_EQ(summary.prefills, 2);  // full-cache prefills: one per sample (blockpress runs its own besides)
    std::map<std::string, SampleResult> knorm, blocks;
    for (const SampleResult& row : store.results(summary.run_id))
      if (row.budget == "24") (row.policy == "knorm" ? knorm : blocks)[row.sample_key] = row;
    ASSERT_EQ(knorm.size(), 2u);
    ASSERT_EQ(blocks.size(), 2u);
    for (const auto& [key, row] : blocks) {
      // Both end at 24 entries per (layer, KV head): the same bytes and kept share.
      EXPECT_EQ(row.kv_bytes, knorm[key].kv_bytes) << key;
      EXPECT_DOUBLE_EQ(row.kept_ratio, knorm[key].kept_ratio) << key;
      EXPECT_LT(row.kept_ratio, 0.5) << key;
      EXPECT_FALSE(row.prediction.empty()) << key;
    }
    // The last (sample, policy, budget) was blocks at 24: its engine cut the cache after every block.
    const EvictionReport* report = runner->eviction_report();
    ASSERT_NE(report, nullptr);
    EXPECT_EQ(report->policy, "blockpress");
    EXPECT_GT(report->prompt_len, 3 * 16);
    EXPECT_EQ(report->applications, (report->prompt_len + 15) / 16);
  }
  std::filesystem::remove(db);
}
