// The SQLite store: schema version, runs, unique results, aggregates, leaderboard selection.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <filesystem>

#include "core/util/error.h"
#include "evals/results_store.h"
#include "store_records.h"
#include "temp_db.h"

using namespace kvevict::evals;

namespace {

using test::TempDb;

RunRecord record(const std::string& hash, const std::string& model = "m.gguf") { return test::run_record(hash, model); }

SampleResult result(const std::string& key, const std::string& policy, const std::string& budget, double score) {
  return test::sample_result(key, policy, budget, score);
}

}  // namespace

TEST(ResultsStore, CreatesSchemaWithVersionAndWal) {
  TempDb db("store_schema");
  { ResultsStore store(db.path); EXPECT_EQ(store.schema_version(), ResultsStore::kSchemaVersion); }
  ResultsStore again(db.path);  // reopening migrates nothing
  EXPECT_EQ(again.schema_version(), ResultsStore::kSchemaVersion);
  EXPECT_TRUE(std::filesystem::exists(db.path + "-wal"));
}

TEST(ResultsStore, RefusesANewerSchema) {
  TempDb db("store_newer");
  { ResultsStore store(db.path); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path.c_str(), &raw), SQLITE_OK);
  sqlite3_exec(raw, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  try {
    ResultsStore store(db.path);
    ADD_FAILURE() << "opened a newer schema";
  } catch (const kvevict::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("schema version 99"), std::string::npos) << e.what();
  }
}

TEST(ResultsStore, RunsAreFoundByIdentityAndStatus) {
  TempDb db("store_runs");
  ResultsStore store(db.path);
  int64_t id = store.create_run(record("h1"));
  EXPECT_FALSE(store.find_run("h1", "mh", "finished"));
  ASSERT_TRUE(store.find_run("h1", "mh", "running"));
  store.finish_run(id, "finished");
  auto finished = store.find_run("h1", "mh", "finished");
  ASSERT_TRUE(finished);
  EXPECT_EQ(finished->id, id);
  EXPECT_FALSE(finished->finished_at.empty());
  EXPECT_FALSE(store.find_run("h2", "mh", "finished"));
  EXPECT_FALSE(store.find_run("h1", "other", "finished"));
}

TEST(ResultsStore, DuplicateResultsAreRejectedAtomically) {
  TempDb db("store_dup");
  ResultsStore store(db.path);
  int64_t id = store.create_run(record("h"));
  store.insert_results(id, {result("k1", "p", "10%", 50)});
  // The second batch holds a new row and a duplicate: nothing of it may land.
  EXPECT_THROW(store.insert_results(id, {result("k2", "p", "10%", 10), result("k1", "p", "10%", 50)}),
               kvevict::RuntimeError);
  EXPECT_EQ(store.count_results(id), 1);
  auto keys = store.completed_keys(id);
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_TRUE(keys.count(ResultsStore::result_key("needle", "k1", "p", "10%")));
}

TEST(ResultsStore, TextIsStoredVerbatimNotPastedIntoSql) {
  TempDb db("store_text");
  ResultsStore store(db.path);
  int64_t id = store.create_run(record("h'); DROP TABLE runs; --"));
  SampleResult tricky = result("k'\"", "p'); DELETE FROM results; --", "10%", 1);
  tricky.prediction = "it's \"quoted\"\nand\x01odd";
  store.insert_results(id, {tricky});
  auto rows = store.results(id);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].prediction, tricky.prediction);
  EXPECT_EQ(rows[0].policy, tricky.policy);
  EXPECT_TRUE(store.find_run("h'); DROP TABLE runs; --", "mh", "running"));
}

TEST(ResultsStore, AggregatesAndLeaderboardUseTheNewestFinishedRun) {
  TempDb db("store_agg");
  ResultsStore store(db.path);
  int64_t old_run = store.create_run(record("a"));
  store.insert_results(old_run, {result("k1", "p", "10%", 0), result("k2", "p", "10%", 0)});
  store.update_aggregates(old_run);
  store.finish_run(old_run, "finished");
  int64_t new_run = store.create_run(record("b"));
  store.insert_results(new_run, {result("k1", "p", "10%", 100), result("k2", "p", "10%", 50),
                                 result("k1", "q", "10%", 20)});
  store.update_aggregates(new_run);
  // Not finished yet: the leaderboard still shows the old run.
  auto rows = store.leaderboard();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].run_id, old_run);
  store.finish_run(new_run, "finished");
  rows = store.leaderboard();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].policy, "p");
  EXPECT_DOUBLE_EQ(rows[0].score, 75.0);
  EXPECT_EQ(rows[0].samples, 2);
  EXPECT_DOUBLE_EQ(rows[0].kv_bytes, 1000);
  EXPECT_EQ(store.leaderboard("passkey").size(), 0u);
  EXPECT_EQ(store.leaderboard("", "m.gg").size(), 2u);
  EXPECT_EQ(store.leaderboard("", "other").size(), 0u);
  auto cells = store.grid_cells("needle");
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].length, 100);
  EXPECT_DOUBLE_EQ(cells[0].depth, 50);
}

TEST(ResultsStore, UnwritableLocationIsAClearError) {
  try {
    ResultsStore store("/no/such/dir/kvevict.db");
    ADD_FAILURE();
  } catch (const kvevict::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/dir/kvevict.db"), std::string::npos);
  }
}

TEST(ResultsStore, AShardIsItsOwnRunAndStaysOffTheLeaderboard) {
  TempDb db("store_shard");
  ResultsStore store(db.path);
  RunRecord part = record("h");
  part.shard = "1/2";
  int64_t shard_run = store.create_run(part);
  store.insert_results(shard_run, {result("k1", "p", "10%", 100)});
  store.update_aggregates(shard_run);
  store.finish_run(shard_run, "finished");
  // The same config and model, but a part of its samples: neither a finished whole run nor on the board.
  EXPECT_FALSE(store.find_run("h", "mh", "finished"));
  ASSERT_TRUE(store.find_run("h", "mh", "finished", "1/2"));
  EXPECT_EQ(store.find_run("h", "mh", "finished", "1/2")->shard, "1/2");
  EXPECT_FALSE(store.find_run("h", "mh", "finished", "2/2"));
  EXPECT_TRUE(store.leaderboard().empty());
  int64_t whole = store.create_run(record("h"));
  store.insert_results(whole, {result("k1", "p", "10%", 50)});
  store.update_aggregates(whole);
  store.finish_run(whole, "finished");
  ASSERT_EQ(store.leaderboard().size(), 1u);
  EXPECT_EQ(store.leaderboard()[0].run_id, whole);
}
