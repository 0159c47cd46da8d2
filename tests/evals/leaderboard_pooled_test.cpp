// The pooled "all tasks" group: hand-made aggregates and per-sample scores, its n, sample-weighted
// mean, interval over the union of samples and paired difference to full.
#include <gtest/gtest.h>

#include "evals/leaderboard_pooled.h"
#include "evals/leaderboard_stats.h"

using namespace kvevict::evals;

namespace {

AggregateRow row(const std::string& task, const std::string& budget, int64_t samples, double score) {
  AggregateRow r;
  r.run_id = 1;
  r.model = "m.gguf";
  r.task = task;
  r.policy = r.policy_name = "p";
  r.budget = budget;
  r.samples = samples;
  r.score = score;
  r.kept_ratio = budget == "full" ? 1.0 : (task == "a" ? 0.2 : 0.3);
  return r;
}

}  // namespace

TEST(LeaderboardPooled, OneTaskHasNoPooledGroup) {
  EXPECT_TRUE(pooled_rows({row("a", "10%", 4, 50), row("a", "full", 4, 100)}).empty());
}

TEST(LeaderboardPooled, CellsPoolEveryTasksSamples) {
  // Task a: 4 samples at 10% scoring 100, 0, 0, 0 (mean 25); task b: 2 samples scoring 100, 100.
  // Full: every sample 100.
  std::vector<AggregateRow> rows = {row("a", "10%", 4, 25), row("a", "full", 4, 100), row("b", "10%", 2, 100),
                                    row("b", "full", 2, 100)};
  auto pooled = pooled_rows(rows);
  ASSERT_EQ(pooled.size(), 2u);
  EXPECT_EQ(pooled[0].task, kPooledTask);
  EXPECT_EQ(pooled[0].budget, "10%");
  EXPECT_EQ(pooled[0].samples, 6);
  EXPECT_DOUBLE_EQ(pooled[0].score, (4 * 25.0 + 2 * 100.0) / 6);     // 50: sample-weighted
  EXPECT_DOUBLE_EQ(pooled[0].kept_ratio, (4 * 0.2 + 2 * 0.3) / 6);

  SampleScoreSource scores = [](const AggregateRow& a) -> std::map<std::string, double> {
    if (a.budget == "full") return a.task == "a" ? std::map<std::string, double>{{"0", 100}, {"1", 100}, {"2", 100}, {"3", 100}}
                                                 : std::map<std::string, double>{{"0", 100}, {"1", 100}};
    // Sample keys repeat across tasks on purpose: pooling must keep them apart.
    return a.task == "a" ? std::map<std::string, double>{{"0", 100}, {"1", 0}, {"2", 0}, {"3", 0}}
                         : std::map<std::string, double>{{"0", 100}, {"1", 100}};
  };
  auto groups = build_leaderboard(rows, scores);
  ASSERT_EQ(groups.size(), 3u);
  const LeaderboardGroup& all = groups[2];
  EXPECT_EQ(all.task, kPooledTask);
  ASSERT_EQ(all.rows.size(), 1u);
  const LeaderboardCell& cell = all.rows[0].cells.at("10%");
  EXPECT_EQ(cell.score.n, 6);
  EXPECT_DOUBLE_EQ(cell.score.mean, 50);
  // Every score is 0 or 100: Wilson's interval for 3 of 6 (hand-computed: 18.76 .. 81.24).
  EXPECT_NEAR(cell.score.interval.low, 18.76, 0.01);
  EXPECT_NEAR(cell.score.interval.high, 81.24, 0.01);
  // Paired with each sample's own full score: differences -100 x 3, 0 x 3.
  EXPECT_EQ(cell.vs_full.n, 6);
  EXPECT_DOUBLE_EQ(cell.vs_full.mean, -50);
}

// A pooled cell of tasks decoded with different prefill attentions says so instead of naming one.
TEST(LeaderboardPooled, TasksOfDifferentPrefillAttentionsPoolAsMixed) {
  std::vector<AggregateRow> rows = {row("a", "10%", 4, 25), row("b", "10%", 2, 100)};
  EXPECT_EQ(pooled_rows(rows)[0].prefill_attention, "own");
  rows[1].prefill_attention = "flashinfer";
  const auto pooled = pooled_rows(rows);
  ASSERT_EQ(pooled.size(), 1u);
  EXPECT_EQ(pooled[0].prefill_attention, "mixed");
}
