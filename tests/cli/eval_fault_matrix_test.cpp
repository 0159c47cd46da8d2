// The fault matrix of `kvevict eval` on stories260K: SIGKILL at seeded points, a full disk, a
// read-only mount, a database locked by another connection, two writers. After each fault the
// database passes `PRAGMA integrity_check`, and once resumed (or finished) its results are
// row-for-row equal to an uninterrupted run's (every column but ids, timestamps and timings).
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/mount.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "process.h"

using kvevict::test::run_shell;

namespace {

const std::string kModels = std::string(KVEVICT_SHARED_DIR) + "/models/stories260K";

// The smallest config that runs the real decoder through two tasks, two policies and two budgets.
std::string config_text(const std::string& name) {
  return "name: " + name + "\nmodel: " + kModels + "/stories260K.bin\ntokenizer: " + kModels +
         "/tok512.bin\ndevice: cpu\nseed: 3\nthreads: 1\ntasks:\n"
         "  passkey: {lengths: [96, 160], depths: [25, 75], samples: 1}\n"
         "  fidelity: {lengths: [128], continuation: 16, greedy: 8, samples: 2}\n"
         "policies: [snapkv, h2o]\nbudgets: [\"25%\", full]\n";
}
constexpr int64_t kTotal = (4 + 2) * 2 * 2;

struct Dir {
  std::filesystem::path path;
  explicit Dir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kvevict_fault_" + name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~Dir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

std::string cli(const std::string& args) { return std::string(KVEVICT_BINARY) + " " + args; }

// One SQL query's rows, each row's columns joined by '|'.
std::vector<std::string> query(const std::string& db, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* handle = nullptr;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(handle);
    return {"cannot open " + db};
  }
  sqlite3_busy_timeout(handle, 60000);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    rows.push_back(std::string("prepare failed: ") + sqlite3_errmsg(handle));
  } else {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
        const unsigned char* text = sqlite3_column_text(stmt, c);
        row += (c ? "|" : "") + std::string(text ? reinterpret_cast<const char*>(text) : "NULL");
      }
      rows.push_back(row);
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return rows;
}

std::string integrity(const std::string& db) {
  auto rows = query(db, "PRAGMA integrity_check");
  return rows.empty() ? "no answer" : rows[0];
}

// Every result column of one run that does not depend on time, in key order (ids, created_at,
// ttft_ms, decode_tok_s left out; evict_ms, a timing, removed from extra_json).
std::vector<std::string> run_rows(const std::string& db, int run_id) {
  return query(db,
               "SELECT task, sample_key, policy, budget, length, depth, sample_index, grid_json, query_aware, "
               "prediction, reference, score, kept_ratio, kv_bytes, kv_bytes_full, json_remove(extra_json, "
               "'$.evict_ms') FROM results WHERE run_id = " +
                   std::to_string(run_id) + " ORDER BY task, sample_key, policy, budget");
}

std::vector<std::string> statuses(const std::string& db) { return query(db, "SELECT status FROM runs ORDER BY id"); }

class EvalFaultMatrix : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModels + "/stories260K.bin")) return;
    reference_dir_ = new Dir("reference");
    std::string config = reference_dir_->file("fault.yaml", config_text("fault"));
    reference_db_ = (reference_dir_->path / "clean.db").string();
    auto clean = run_shell(cli("eval -q -c " + config + " --db " + reference_db_));
    ASSERT_EQ(clean.exit_code, 0) << clean.output;
    reference_ = run_rows(reference_db_, 1);
    ASSERT_EQ(static_cast<int64_t>(reference_.size()), kTotal);
  }
  static void TearDownTestSuite() {
    delete reference_dir_;
    reference_dir_ = nullptr;
  }
  void SetUp() override {
    if (!std::filesystem::exists(kModels + "/stories260K.bin")) {
      GTEST_SKIP() << "stories260K not found in " << kModels << " (the fault matrix needs the real decoder)";
    }
  }
  // Resumes `config` into `db` and checks the result equals the uninterrupted run.
  static void expect_resumed_equal(const std::string& config, const std::string& db) {
    auto resumed = run_shell(cli("eval -q -c " + config + " --db " + db + " --resume"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(integrity(db), "ok");
    EXPECT_EQ(statuses(db), std::vector<std::string>{"finished"});
    EXPECT_EQ(run_rows(db, 1), reference_);
  }
  static inline Dir* reference_dir_ = nullptr;
  static inline std::string reference_db_;
  static inline std::vector<std::string> reference_;
};

TEST_F(EvalFaultMatrix, SigkillAtSeededPointsLosesNothing) {
  for (unsigned seed : {1u, 2u, 3u, 4u}) {
    Dir dir("kill" + std::to_string(seed));
    std::string config = dir.file("fault.yaml", config_text("fault"));
    std::string db = (dir.path / "r.db").string();
    // The point: after `after` results are committed (0: as soon as the process starts), plus a
    // seeded delay of up to 30 ms into the next sample.
    std::mt19937 rng(seed);
    const int64_t after = static_cast<int64_t>(rng() % 4) * 6;
    const int delay_ms = static_cast<int>(rng() % 30);
    pid_t pid = kvevict::test::spawn_kvevict({"eval", "-q", "-c", config, "--db", db});
    for (int i = 0; i < 2000 && after > 0; ++i) {
      if (std::filesystem::exists(db)) {
        auto count = query(db, "SELECT COUNT(*) FROM results");
        if (!count.empty() && std::atoll(count[0].c_str()) >= after) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    kill(pid, SIGKILL);
    int code = kvevict::test::wait_exit_code(pid);
    EXPECT_TRUE(code == -SIGKILL || code == 0) << "seed " << seed << ": exit " << code;
    if (std::filesystem::exists(db)) {
      EXPECT_EQ(integrity(db), "ok") << "seed " << seed;
      auto count = query(db, "SELECT COUNT(*) FROM results");
      ASSERT_FALSE(count.empty());
      EXPECT_EQ(std::atoll(count[0].c_str()) % 2, 0) << "a sample's results are committed together";
    }
    expect_resumed_equal(config, db);
  }
}

TEST_F(EvalFaultMatrix, FullDiskFailsCleanlyAndResumes) {
  Dir dir("full");
  std::string config = dir.file("fault.yaml", config_text("fault"));
  std::string db = (dir.path / "r.db").string();
  // RLIMIT_FSIZE stands in for a full disk: writes past the limit fail with EFBIG (SIGXFSZ
  // ignored, as a full disk sends no signal). The smallest limit that lets at least one sample in
  // is the case checked: the disk fills in the middle of the run.
  bool mid_run = false;
  for (int kib : {64, 96, 128, 160, 192, 256, 384}) {
    std::filesystem::remove_all(dir.path / "r.db");
    std::filesystem::remove_all(dir.path / "r.db-wal");
    std::filesystem::remove_all(dir.path / "r.db-shm");
    auto full = run_shell("trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; " +
                          cli("eval -q -c " + config + " --db " + db));
    if (full.exit_code == 0) break;  // the limit no longer bites
    EXPECT_EQ(full.exit_code, 1) << full.output;
    EXPECT_NE(full.output.find(db + ": "), std::string::npos) << "the error names the database: " << full.output;
    if (!std::filesystem::exists(db)) continue;
    EXPECT_EQ(integrity(db), "ok") << kib << " KiB";
    auto count = query(db, "SELECT COUNT(*) FROM results");
    ASSERT_FALSE(count.empty());
    const int64_t stored = std::atoll(count[0].c_str());
    EXPECT_LT(stored, kTotal);
    if (stored > 0) {
      mid_run = true;
      break;
    }
  }
  ASSERT_TRUE(mid_run) << "no file-size limit stopped the run in its middle";
  expect_resumed_equal(config, db);
}

TEST_F(EvalFaultMatrix, ReadOnlyMountIsRefusedAndNothingChanges) {
  Dir dir("readonly");
  std::string config = dir.file("fault.yaml", config_text("fault"));
  std::filesystem::create_directories(dir.path / "data");
  std::filesystem::create_directories(dir.path / "ro");
  std::string db = (dir.path / "data" / "r.db").string();
  // Half a run, then the folder becomes a read-only mount.
  auto limited = run_shell(cli("eval -q -c " + config + " --db " + db + " --set tasks.passkey.lengths=[96]"));
  ASSERT_EQ(limited.exit_code, 0) << limited.output;
  const auto before = query(db, "SELECT * FROM results ORDER BY id");
  if (mount((dir.path / "data").c_str(), (dir.path / "ro").c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      mount(nullptr, (dir.path / "ro").c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
    umount((dir.path / "ro").c_str());
    GTEST_SKIP() << "cannot make a read-only bind mount here (needs root and mount rights)";
  }
  std::string ro_db = (dir.path / "ro" / "r.db").string();
  auto refused = run_shell(cli("eval -q -c " + config + " --db " + ro_db));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find(ro_db), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("not writable: Read-only file system"), std::string::npos) << refused.output;
  umount((dir.path / "ro").c_str());
  EXPECT_EQ(integrity(db), "ok");
  EXPECT_EQ(query(db, "SELECT * FROM results ORDER BY id"), before);
  EXPECT_EQ(statuses(db), std::vector<std::string>{"finished"});
  // Writable again: the full config runs and equals the uninterrupted run.
  auto full = run_shell(cli("eval -q -c " + config + " --db " + db));
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_EQ(integrity(db), "ok");
  EXPECT_EQ(run_rows(db, 2), reference_);
}

TEST_F(EvalFaultMatrix, LockedDatabaseWaitsForTheLock) {
  Dir dir("locked");
  std::string config = dir.file("fault.yaml", config_text("fault"));
  std::string db = (dir.path / "r.db").string();
  ASSERT_EQ(run_shell(cli("eval -q -c " + config + " --db " + db + " --set budgets=[full]")).exit_code, 0);
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  pid_t pid = kvevict::test::spawn_kvevict({"eval", "-q", "-c", config, "--db", db});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // eval is now waiting on the lock
  sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(kvevict::test::wait_exit_code(pid), 0);
  EXPECT_EQ(integrity(db), "ok");
  EXPECT_EQ(run_rows(db, 2), reference_);
  EXPECT_EQ(statuses(db), (std::vector<std::string>{"finished", "finished"}));
}

TEST_F(EvalFaultMatrix, TwoWritersBothComplete) {
  Dir dir("writers");
  std::string a = dir.file("a.yaml", config_text("fault"));
  std::string db = (dir.path / "r.db").string();
  // --force on both: without it, whichever starts second could find the other finished and skip.
  pid_t first = kvevict::test::spawn_kvevict({"eval", "-q", "-c", a, "--db", db, "--force"});
  pid_t second = kvevict::test::spawn_kvevict({"eval", "-q", "-c", a, "--db", db, "--force"});
  EXPECT_EQ(kvevict::test::wait_exit_code(first), 0);
  EXPECT_EQ(kvevict::test::wait_exit_code(second), 0);
  EXPECT_EQ(integrity(db), "ok");
  EXPECT_EQ(statuses(db), (std::vector<std::string>{"finished", "finished"}));
  for (int run : {1, 2}) EXPECT_EQ(run_rows(db, run), reference_) << "run " << run;
}

}  // namespace
