// `kvevict compare A B` as a process, on the hand-made database of tests/evals/leaderboard_fixture.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/cli_run.h"
#include "evals/leaderboard_fixture.h"

using kvevict::test::run_kvevict;

TEST(CompareCommand, PairedDifferencePerTaskAndBudget) {
  kvevict::test::HandMadeDb db("compare_ok");
  auto table = run_kvevict("compare snap keep --db " + db.path);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  // 25%: snap - keep = 0 on s0..s2, -100 on s3..s7 -> -62.5 [-87.8, -25.0], keep better.
  size_t line = table.out.find("passkey     25%  8   37.5  100.0");
  ASSERT_NE(line, std::string::npos) << table.out;
  std::string row = table.out.substr(line, table.out.find('\n', line) - line);
  EXPECT_NE(row.find("-62.5 [-87.8, -25.0]  keep better"), std::string::npos) << row;
  // 50%: -12.5 with an interval reaching 0 exactly: it includes zero.
  EXPECT_NE(table.out.find("-12.5 [-37.5, 0.0]  no significant difference"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("0.0 [0.0, 0.0]  no significant difference"), std::string::npos) << table.out;
  auto json = run_kvevict("compare keep snap --format json --db " + db.path);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto records = nlohmann::json::parse(json.out);
  ASSERT_EQ(records.size(), 4u);  // 25%, 50%, 75%, full
  EXPECT_EQ(records[0]["budget"], "25%");
  EXPECT_DOUBLE_EQ(records[0]["difference"].get<double>(), 62.5);
  EXPECT_NEAR(records[0]["low"].get<double>(), 25.0, 1e-9);
  EXPECT_TRUE(records[0]["significant"].get<bool>());
  EXPECT_EQ(records[0]["verdict"], "keep better");
  EXPECT_EQ(records[3]["verdict"], "no significant difference");
}

TEST(CompareCommand, BadInputExitsWith2) {
  kvevict::test::HandMadeDb db("compare_bad");
  auto unknown = run_kvevict("compare snap nope --db " + db.path);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("nope: no such policy on the leaderboard (policies: keep, odd, snap)"), std::string::npos)
      << unknown.err;
  auto missing = run_kvevict("compare snap keep --db " + (db.dir / "missing.db").string());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("missing.db: no such results database"), std::string::npos) << missing.err;
  EXPECT_EQ(run_kvevict("compare snap snap --db " + db.path).exit_code, 2);
  EXPECT_EQ(run_kvevict("compare snap --db " + db.path).exit_code, 2);

  // Two policies scored on disjoint samples: nothing to pair.
  {
    kvevict::evals::ResultsStore store(db.path);
    kvevict::evals::RunRecord run;
    run.name = run.config_hash = run.config_yaml = run.kvevict_version = run.git_commit = run.model_hash = "x";
    run.model = "/models/other.gguf";
    run.device = "cpu";
    int64_t id = store.create_run(run);
    std::vector<kvevict::evals::SampleResult> rows(2);
    rows[0].task = rows[1].task = "passkey";
    rows[0].budget = rows[1].budget = "full";
    rows[0].policy = "left";
    rows[0].sample_key = "a";
    rows[1].policy = "right";
    rows[1].sample_key = "b";
    store.insert_results(id, rows);
    store.update_aggregates(id);
    store.finish_run(id, "finished");
  }
  auto disjoint = run_kvevict("compare left right --db " + db.path);
  EXPECT_EQ(disjoint.exit_code, 2);
  EXPECT_NE(disjoint.err.find("left and right: no sample scored with both policies"), std::string::npos) << disjoint.err;
}
