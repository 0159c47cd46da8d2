// replay_result (evals/replay.h) with the fake model: every stored result replays equal; a stored
// row that differs from what its content gives is reported by field; what cannot be replayed
// (unknown id, rows and databases from before schema version 4, altered content, a changed model)
// is a UsageError, and the database is not written in any case.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <filesystem>

#include "core/util/error.h"
#include "core/util/sha256.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "evals/replay.h"
#include "evals/runner.h"
#include "old_schema_db.h"
#include "temp_db.h"

using namespace kvevict::evals;

namespace {

using test::TempDb;

const char* kConfig =
    "name: replay\n"
    "model: \"fake:\"\n"
    "seed: 11\n"
    "tasks:\n"
    "  passkey: {lengths: [60], samples: 2}\n"
    "  needle: {lengths: [100], depths: [50]}\n"
    "  fidelity: {lengths: [80], continuation: 8, greedy: 4, samples: 1}\n"
    "policies: [alpha, {policy: beta, label: beta-2, params: {window: 2}}]\n"
    "budgets: [\"20%\", \"12\", full]\n";

int64_t write_run(const std::string& db) {
  ResultsStore store(db);
  FakeRunner runner("fake:");
  return run_eval(parse_eval_config(kConfig, "replay.yaml"), runner, store, {}).run_id;
}

std::vector<SampleResult> stored_rows(const std::string& db, int64_t run) {
  ResultsStore store(db, ResultsStore::Access::ReadOnly);
  return store.results(run);
}

void sql(const std::string& path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  test::exec_sql(db, text);
  sqlite3_close(db);
}

// The database file and its WAL, hashed: equal before and after means nothing was written. An
// empty WAL counts as none: SQLite creates one to read a WAL-mode file, even read-only.
std::string fingerprint(const std::string& db) {
  std::string all = kvevict::sha256_file(db);
  std::error_code error;
  if (std::filesystem::file_size(db + "-wal", error) > 0 && !error) all += kvevict::sha256_file(db + "-wal");
  return all;
}

ReplayReport replay(const std::string& db, int64_t id) {
  ResultsStore store(db, ResultsStore::Access::ReadOnly);
  return replay_result(store, id, make_sample_runner);
}

// The UsageError's message of replaying `id`; "" when it was replayed.
std::string refusal(const std::string& db, int64_t id) {
  try {
    replay(db, id);
  } catch (const kvevict::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Replay, EveryStoredResultReplaysEqual) {
  TempDb db("replay_equal");
  const int64_t run = write_run(db.path);
  const std::string before = fingerprint(db.path);
  const auto rows = stored_rows(db.path, run);
  ASSERT_EQ(rows.size(), 4u * 2 * 3);
  for (const auto& row : rows) {
    SCOPED_TRACE(row.task + " " + row.sample_key + " " + row.policy + " " + row.budget);
    ReplayReport report = replay(db.path, row.id);
    EXPECT_TRUE(report.equal()) << report.differences.front();
    EXPECT_EQ(report.prediction, row.prediction);
    EXPECT_EQ(report.score, row.score);
    EXPECT_EQ(report.policy.hash, row.policy_hash);
    EXPECT_EQ(report.eviction.has_value(), row.budget != "full");
    if (report.eviction) {
      EXPECT_EQ(report.eviction->policy, row.policy);
    }
  }
  EXPECT_EQ(fingerprint(db.path), before);
}

TEST(Replay, AStoredRowThatDiffersIsReportedByField) {
  TempDb db("replay_differs");
  const int64_t run = write_run(db.path);
  const SampleResult row = stored_rows(db.path, run).front();
  sql(db.path, "UPDATE results SET prediction = 'something else', score = score + 1 WHERE id = " +
                   std::to_string(row.id));
  ReplayReport report = replay(db.path, row.id);
  EXPECT_FALSE(report.equal());
  EXPECT_EQ(report.differences, (std::vector<std::string>{"prediction", "score"}));
  EXPECT_EQ(report.prediction, row.prediction);  // the replay gives what the sweep gave
}

TEST(Replay, WhatCannotBeReplayedIsRefusedAndNothingIsWritten) {
  TempDb db("replay_refused");
  const int64_t run = write_run(db.path);
  const SampleResult row = stored_rows(db.path, run).front();
  std::string before = fingerprint(db.path);
  EXPECT_NE(refusal(db.path, 999999).find("result #999999: no such result"), std::string::npos);
  EXPECT_EQ(fingerprint(db.path), before);

  sql(db.path, "UPDATE runs SET model_hash = 'feed'");
  EXPECT_NE(refusal(db.path, row.id).find("has changed since run #"), std::string::npos) << refusal(db.path, row.id);
  sql(db.path, "UPDATE runs SET model_hash = '" + kvevict::evals::FakeRunner("fake:").model_hash() + "'");
  EXPECT_EQ(refusal(db.path, row.id), "");

  sql(db.path, "UPDATE policies SET source = source || '#' WHERE hash = '" + row.policy_hash + "'");
  EXPECT_NE(refusal(db.path, row.id).find("the stored policy " + row.policy_hash.substr(0, 12) +
                                          " does not match its hash (altered)"),
            std::string::npos)
      << refusal(db.path, row.id);
  sql(db.path, "UPDATE prompts SET prefill = prefill || ' extra' WHERE hash = '" + row.prompt_hash + "'");
  EXPECT_NE(refusal(db.path, row.id).find("the stored prompt " + row.prompt_hash.substr(0, 12) +
                                          " does not match its hash (altered)"),
            std::string::npos);
  sql(db.path, "DELETE FROM prompts");
  EXPECT_NE(refusal(db.path, row.id).find("is not in the database"), std::string::npos);
  before = fingerprint(db.path);
  EXPECT_NE(refusal(db.path, row.id).find("is not in the database"), std::string::npos);
  EXPECT_EQ(fingerprint(db.path), before);
}

TEST(Replay, RowsAndDatabasesFromBeforeVersionFourAreRefused) {
  TempDb db("replay_old");
  test::write_old_database(db.path, 3);
  const std::string before = fingerprint(db.path);
  // Opened read-only, a version 3 database stays version 3: the replay does not migrate it.
  std::string message = refusal(db.path, 1);
  EXPECT_NE(message.find("has schema version 3"), std::string::npos) << message;
  EXPECT_EQ(fingerprint(db.path), before);
  { ResultsStore migrate(db.path); }
  message = refusal(db.path, 1);
  EXPECT_NE(message.find("result #1 was written before results stored their prompt"), std::string::npos) << message;
}
