// The results store never loses results silently (issue 13): paths that cannot persist are refused,
// unknown schema versions are refused, today's (version 1) databases migrate with their rows, a
// failed run keeps its reason, and a run written by a live process cannot be claimed by another.
#include <gtest/gtest.h>

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/util/error.h"
#include "evals/results_store.h"
#include "old_schema_db.h"
#include "store_records.h"
#include "temp_db.h"

using namespace kvevict::evals;

namespace {

using test::TempDb;

void sql(const std::string& path, const std::string& text) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, text.c_str(), nullptr, nullptr, &message), SQLITE_OK) << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
}

RunRecord record(const std::string& hash) { return test::run_record(hash, "m"); }

// "pid:start time" as the store records a process (field 22 of /proc/<pid>/stat).
std::string identity(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;
  return std::to_string(pid) + ":" + field;
}

}  // namespace

TEST(ResultsStoreSafety, PathsThatCannotPersistAreRefused) {
  auto dir = std::filesystem::temp_directory_path() / ("kvevict_store_dir" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  for (const std::string& path : {std::string(""), std::string(":memory:"), std::string("file:r.db?mode=memory"),
                                  std::string("file::memory:?cache=shared"), dir.string()}) {
    try {
      ResultsStore store(path);
      ADD_FAILURE() << "'" << path << "' accepted as a results database";
    } catch (const kvevict::Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "nothing is written into a refused directory";
  std::filesystem::remove_all(dir);
}

TEST(ResultsStoreSafety, NegativeSchemaVersionIsRefusedNamingTheFile) {
  TempDb db("store_negative");
  sql(db.path, "PRAGMA user_version=-1");
  try {
    ResultsStore store(db.path);  // indexed kMigrations[-1] before
    ADD_FAILURE() << "opened a database with schema version -1";
  } catch (const kvevict::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find(db.path + ": results database has schema version -1"), std::string::npos)
        << e.what();
  }
}

TEST(ResultsStoreSafety, VersionOneDatabaseMigratesWithItsRows) {
  TempDb db("store_v1");
  const int64_t run = 1;
  test::write_old_database(db.path, 1);  // as the first release wrote it: no reason, owner, shard
  ResultsStore store(db.path);
  EXPECT_EQ(store.schema_version(), ResultsStore::kSchemaVersion);
  EXPECT_EQ(store.run(run)->shard, "");
  ASSERT_EQ(store.results(run).size(), 2u);
  EXPECT_EQ(store.results(run)[0].score, 100);
  store.finish_run(run, "failed", "decoder error: out of memory");
  auto failed = store.run(run);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, "failed");
  EXPECT_EQ(failed->reason, "decoder error: out of memory");
  // A failed run is unfinished: --resume finds it, and claiming it clears the reason.
  ASSERT_TRUE(store.find_run("cfg", "mh", "unfinished"));
  store.claim_run(run);
  EXPECT_EQ(store.run(run)->status, "running");
  EXPECT_EQ(store.run(run)->reason, "");
}

TEST(ResultsStoreSafety, ARunOwnedByALiveProcessCannotBeClaimed) {
  TempDb db("store_owner");
  ResultsStore store(db.path);
  int64_t run = store.create_run(record("h"));
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  sql(db.path, "UPDATE runs SET owner = '" + identity(child) + "'");
  try {
    store.claim_run(run);
    ADD_FAILURE() << "claimed a run that a live process writes";
  } catch (const kvevict::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("is being written by another kvevict process (pid " +
                                         std::to_string(child) + ")"),
              std::string::npos)
        << e.what();
  }
  // The same pid with another start time is a reused pid, not the owner.
  sql(db.path, "UPDATE runs SET owner = '" + std::to_string(child) + ":1'");
  EXPECT_NO_THROW(store.claim_run(run));
  sql(db.path, "UPDATE runs SET owner = '" + identity(child) + "'");
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_NO_THROW(store.claim_run(run)) << "the owner was killed: its run is free to resume";
}
