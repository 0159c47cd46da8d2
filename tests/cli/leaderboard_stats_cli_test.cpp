// `kvevict leaderboard --sort iso --iso-threshold F` and `kvevict report --iso-threshold F` as
// processes, on the hand-made database of tests/evals/leaderboard_fixture.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "evals/leaderboard_fixture.h"

using kvevict::test::run_kvevict;

TEST(LeaderboardStatsCli, SortByIsoAndThreshold) {
  kvevict::test::HandMadeDb db("lb_cli_sort");
  auto by_mean = run_kvevict("leaderboard --db " + db.path);
  ASSERT_EQ(by_mean.exit_code, 0) << by_mean.err;
  // Means: keep 100 > odd 93.3 > snap 75; iso-quality: keep < 25% < snap 65% < odd > 75%.
  EXPECT_LT(by_mean.out.find("\nodd "), by_mean.out.find("\nsnap ")) << by_mean.out;
  auto by_iso = run_kvevict("leaderboard --sort iso --db " + db.path);
  ASSERT_EQ(by_iso.exit_code, 0) << by_iso.err;
  EXPECT_LT(by_iso.out.find("\nsnap "), by_iso.out.find("\nodd ")) << by_iso.out;
  EXPECT_NE(by_iso.out.find("smallest iso-quality budget first"), std::string::npos);
  // At 90% odd keeps 90 of 100 from the smallest budget on.
  auto loose = nlohmann::json::parse(run_kvevict("leaderboard --format json --iso-threshold 0.9 --db " + db.path).out);
  for (const auto& record : loose) {
    if (record["policy"] == "odd") {
      EXPECT_EQ(record["iso"]["text"], "< 25.0%");
    }
  }
  auto md = run_kvevict("leaderboard --format md --iso-threshold 0.9 --db " + db.path);
  EXPECT_NE(md.out.find("| iso@90% |"), std::string::npos) << md.out;
}

TEST(LeaderboardStatsCli, BadThresholdOrSortExitsWith2) {
  kvevict::test::HandMadeDb db("lb_cli_bad");
  EXPECT_EQ(run_kvevict("leaderboard --iso-threshold 0 --db " + db.path).exit_code, 2);
  EXPECT_EQ(run_kvevict("leaderboard --iso-threshold 1.5 --db " + db.path).exit_code, 2);
  EXPECT_EQ(run_kvevict("leaderboard --sort name --db " + db.path).exit_code, 2);
  EXPECT_EQ(run_kvevict("report --iso-threshold -1 --out " + (db.dir / "r").string() + " --db " + db.path).exit_code, 2);
  auto report = run_kvevict("report --iso-threshold 0.9 --out " + (db.dir / "r").string() + " --db " + db.path);
  EXPECT_EQ(report.exit_code, 0) << report.err;
}
