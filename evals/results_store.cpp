#include "evals/results_store.h"

#include <sqlite3.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "core/util/error.h"
#include "evals/results_schema.h"
#include "evals/sqlite_statement.h"
#include "evals/sqlite_transaction.h"

namespace kvevict::evals {
namespace {


// A process identity that survives pid reuse: "<pid>:<start time in clock ticks since boot>"
// (field 22 of /proc/<pid>/stat). Empty when the process does not exist.
std::string process_identity(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!in || !std::getline(in, stat)) return "";
  size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::to_string(pid) + ":" + field;
  }
  return "";
}

// True when `owner` (a process_identity) names a process that is still running.
bool owner_alive(const std::string& owner) {
  if (owner.empty()) return false;
  pid_t pid = static_cast<pid_t>(std::atol(owner.c_str()));
  if (pid <= 0) return false;
  return process_identity(pid) == owner;
}

// Refuses paths where SQLite would keep the results in memory or in a temporary file deleted on
// close: the run would print "N results written" and keep nothing.
void require_persistent_path(const std::string& path) {
  if (path.empty()) throw UsageError("--db: error: an empty path keeps nothing (SQLite uses a temporary file)");
  if (path == ":memory:") throw UsageError("--db :memory:: error: an in-memory database keeps nothing");
  if (path.rfind("file:", 0) == 0) {
    throw UsageError(path + ": error: SQLite URIs are not accepted for --db (give a file path)");
  }
  struct stat info {};
  if (stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    throw UsageError(path + ": error: the results database must be a regular file (this is " +
                     (S_ISDIR(info.st_mode) ? "a directory" : "not a regular file") + ")");
  }
}

// " (read-only: <reason>)" when `path` (or, before it exists, its folder) cannot be written: SQLite
// only says "unable to open database file" or "attempt to write a readonly database".
std::string writability_hint(const std::string& path) {
  std::string target = path;
  if (access(path.c_str(), F_OK) != 0) {
    size_t slash = path.rfind('/');
    target = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  }
  if (access(target.c_str(), W_OK) == 0) return "";
  return " (" + target + " is not writable: " + std::strerror(errno) + ")";
}

std::string now_utc() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[80];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return text;
}

RunRecord read_run(const Statement& row) {
  RunRecord run;
  run.id = row.int64(0);
  run.name = row.text(1);
  run.config_hash = row.text(2);
  run.config_yaml = row.text(3);
  run.kvevict_version = row.text(4);
  run.git_commit = row.text(5);
  run.model = row.text(6);
  run.model_hash = row.text(7);
  run.device = row.text(8);
  run.seed = static_cast<uint64_t>(row.int64(9));
  run.started_at = row.text(10);
  run.finished_at = row.text(11);
  run.status = row.text(12);
  run.reason = row.text(13);
  run.shard = row.text(14);
  run.scoring = row.text(15);
  run.prefill_attention = row.text(16);
  run.prefill = row.text(17);
  return run;
}

constexpr const char* kRunColumns =
    "id, name, config_hash, config_yaml, kvevict_version, git_commit, model, model_hash, device, seed, started_at, "
    "finished_at, status, reason, shard, ";  // + ResultsStore::run_added_columns()


}  // namespace

ResultsStore::ResultsStore(const std::string& path, Access access) : path_(path) {
  require_persistent_path(path);
  if (access == Access::ReadOnly && ::access(path.c_str(), F_OK) != 0) {
    throw UsageError(path + ": no such results database");
  }
  open(access);
}

void ResultsStore::open(Access access) {
  const int flags = access == Access::ReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path_.c_str(), &db_, flags | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
    std::string message = db_ ? sqlite_error_text(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw RuntimeError(path_ + ": cannot open the results database: " + message + writability_hint(path_));
  }
  try {
    sqlite3_busy_timeout(db_, 60000);
    if (access == Access::ReadOnly) {
      exec("PRAGMA query_only=1");  // a second guard: no statement on this connection may write
      check_version(schema_version());
      return;
    }
    enable_wal();
    exec("PRAGMA synchronous=NORMAL");
    exec("PRAGMA foreign_keys=ON");
    migrate();
  } catch (const RuntimeError& e) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw RuntimeError(e.what() + (access == Access::ReadOnly ? std::string() : writability_hint(path_)));
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

ResultsStore::~ResultsStore() { sqlite3_close(db_); }

void ResultsStore::enable_wal() {
  // Switching the journal mode takes an exclusive lock without calling the busy handler: two
  // processes creating one database at once (two `eval` on a new file) saw "database is locked"
  // here. Retry for the busy timeout instead.
  for (int waited_ms = 0;; waited_ms += 10) {
    const int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || waited_ms >= 60000) break;
    sqlite3_sleep(10);
  }
  exec("PRAGMA journal_mode=WAL");  // once more, for the error message
}

void ResultsStore::exec(const char* sql) { sqlite_exec(db_, path_, sql); }

std::string ResultsStore::run_added_columns() {
  // A database opened read-only is not migrated (replay): before version 5 (6, 7) a column is absent.
  const int version = schema_version();
  return std::string(version >= 5 ? "scoring" : "'' AS scoring") + ", " +
         (version >= 6 ? "prefill_attention" : "'own' AS prefill_attention") + ", " +
         (version >= 7 ? "prefill" : "'shared' AS prefill");
}

int ResultsStore::schema_version() {
  Statement query(db_, path_, "PRAGMA user_version");
  return query.step() ? static_cast<int>(query.int64(0)) : 0;
}

void ResultsStore::check_version(int version) {
  if (version > kSchemaVersion) {
    throw RuntimeError(path_ + ": results database has schema version " + std::to_string(version) +
                       ", newer than this kvevict understands (" + std::to_string(kSchemaVersion) + ")");
  }
  if (version < 0) {  // no kvevict writes one; indexing the migrations with it would read before them
    throw RuntimeError(path_ + ": results database has schema version " + std::to_string(version) +
                       ", which no kvevict writes (not a kvevict database, or damaged)");
  }
}

void ResultsStore::migrate() {
  size_t count = 0;
  const char* const* migrations = schema_migrations(count);
  if (count != static_cast<size_t>(kSchemaVersion)) {
    throw std::logic_error("results_schema.cpp has " + std::to_string(count) + " migrations for schema version " +
                           std::to_string(kSchemaVersion));
  }
  if (schema_version() == kSchemaVersion) return;
  WriteTransaction transaction(db_, path_);
  int version = schema_version();  // re-read under the write lock: another process may have migrated
  check_version(version);
  for (; version < kSchemaVersion; ++version) exec(migrations[version]);
  exec(("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());  // an integer we produced, not input
  transaction.commit();
}

std::optional<RunRecord> ResultsStore::find_run(const std::string& config_hash, const std::string& model_hash,
                                                const std::string& status, const std::string& shard) {
  std::string sql = std::string("SELECT ") + kRunColumns + run_added_columns() +
                    " FROM runs WHERE config_hash = ?1 AND model_hash = ?2 AND shard = ?4 AND (status = ?3 OR (?3 = 'unfinished' AND "
                    "status IN ('running', 'failed'))) ORDER BY id DESC LIMIT 1";
  Statement query(db_, path_, sql.c_str());
  query.bind(1, config_hash).bind(2, model_hash).bind(3, status).bind(4, shard);
  if (!query.step()) return std::nullopt;
  return read_run(query);
}

std::optional<RunRecord> ResultsStore::run(int64_t id) {
  std::string sql = std::string("SELECT ") + kRunColumns + run_added_columns() + " FROM runs WHERE id = ?1";
  Statement query(db_, path_, sql.c_str());
  query.bind(1, id);
  if (!query.step()) return std::nullopt;
  return read_run(query);
}

std::vector<RunRecord> ResultsStore::runs() {
  std::string sql = std::string("SELECT ") + kRunColumns + run_added_columns() + " FROM runs ORDER BY id";
  Statement query(db_, path_, sql.c_str());
  std::vector<RunRecord> all;
  while (query.step()) all.push_back(read_run(query));
  return all;
}

void ResultsStore::require_writable() {
  // SQLite quietly opens a file it cannot write read-only (leaderboard and report only read); a run
  // must not start on one.
  if (sqlite3_db_readonly(db_, "main") == 1) {
    throw RuntimeError(path_ + ": the results database is read-only" + writability_hint(path_));
  }
}

int64_t ResultsStore::create_run(const RunRecord& record) {
  require_writable();
  WriteTransaction transaction(db_, path_);
  Statement insert(db_, path_,
                   "INSERT INTO runs (name, config_hash, config_yaml, kvevict_version, git_commit, model, model_hash, "
                   "device, seed, started_at, status, owner, shard, scoring, prefill_attention, prefill) "
                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'running', ?11, ?12, ?13, ?14, ?15)");
  insert.bind(1, record.name).bind(2, record.config_hash).bind(3, record.config_yaml).bind(4, record.kvevict_version);
  insert.bind(5, record.git_commit).bind(6, record.model).bind(7, record.model_hash).bind(8, record.device);
  insert.bind(9, static_cast<int64_t>(record.seed)).bind(10, now_utc()).bind(11, process_identity(getpid()));
  insert.bind(12, record.shard).bind(13, record.scoring).bind(14, record.prefill_attention).bind(15, record.prefill);
  insert.run();
  int64_t id = sqlite3_last_insert_rowid(db_);
  transaction.commit();
  return id;
}

void ResultsStore::finish_run(int64_t id, const std::string& status, const std::string& reason) {
  WriteTransaction transaction(db_, path_);
  Statement update(db_, path_, "UPDATE runs SET status = ?1, finished_at = ?2, reason = ?3, owner = NULL WHERE id = ?4");
  update.bind(1, status).bind(2, now_utc()).bind(3, reason).bind(4, id);
  update.run();
  transaction.commit();
}

void ResultsStore::claim_run(int64_t id) {
  require_writable();
  WriteTransaction transaction(db_, path_);
  Statement query(db_, path_, "SELECT owner FROM runs WHERE id = ?1");
  query.bind(1, id);
  if (!query.step()) throw RuntimeError(path_ + ": run #" + std::to_string(id) + " does not exist");
  const std::string owner = query.text(0);
  const std::string me = process_identity(getpid());
  if (owner != me && owner_alive(owner)) {
    throw RuntimeError(path_ + ": run #" + std::to_string(id) + " is being written by another kvevict process (pid " +
                       owner.substr(0, owner.find(':')) + "); --resume it once that process has ended");
  }
  Statement update(db_, path_, "UPDATE runs SET owner = ?1, status = 'running', reason = NULL WHERE id = ?2");
  update.bind(1, me).bind(2, id);
  update.run();
  transaction.commit();
}

std::string ResultsStore::result_key(const std::string& task, const std::string& sample_key, const std::string& policy,
                                     const std::string& budget) {
  return task + '\x1f' + sample_key + '\x1f' + policy + '\x1f' + budget;
}

std::set<std::string> ResultsStore::completed_keys(int64_t run_id) {
  Statement query(db_, path_, "SELECT task, sample_key, policy, budget FROM results WHERE run_id = ?1");
  query.bind(1, run_id);
  std::set<std::string> keys;
  while (query.step()) keys.insert(result_key(query.text(0), query.text(1), query.text(2), query.text(3)));
  return keys;
}

void ResultsStore::insert_results(int64_t run_id, const std::vector<SampleResult>& rows,
                                  const std::vector<StoredPrompt>& prompts) {
  if (rows.empty() && prompts.empty()) return;
  WriteTransaction transaction(db_, path_);
  Statement prompt(db_, path_,
                   "INSERT OR IGNORE INTO prompts (hash, prefill, tail, continuation, sample_json) "
                   "VALUES (?1, ?2, ?3, ?4, ?5)");
  for (const auto& p : prompts) {
    prompt.reset();
    prompt.bind(1, p.hash).bind(2, p.text.prefill).bind(3, p.text.tail).bind(4, p.text.continuation);
    prompt.bind(5, p.sample_json).run();
  }
  Statement insert(db_, path_,
                   "INSERT INTO results (run_id, task, sample_key, policy, budget, length, depth, sample_index, "
                   "grid_json, query_aware, prediction, reference, score, kept_ratio, kv_bytes, kv_bytes_full, "
                   "ttft_ms, decode_tok_s, extra_json, created_at, policy_hash, prompt_hash) VALUES "
                   "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)");
  std::string now = now_utc();
  for (const auto& row : rows) {
    insert.reset();
    insert.bind(1, run_id).bind(2, row.task).bind(3, row.sample_key).bind(4, row.policy).bind(5, row.budget);
    insert.bind(6, row.length).bind(7, row.depth).bind(8, row.sample_index).bind(9, row.grid_json);
    insert.bind(10, row.query_aware ? 1 : 0).bind(11, row.prediction).bind(12, row.reference).bind(13, row.score);
    insert.bind(14, row.kept_ratio).bind(15, row.kv_bytes).bind(16, row.kv_bytes_full).bind(17, row.ttft_ms);
    insert.bind(18, row.decode_tok_s).bind(19, row.extra_json).bind(20, now);
    insert.bind(21, row.policy_hash).bind(22, row.prompt_hash);
    insert.run();
  }
  transaction.commit();
}

int64_t ResultsStore::count_results(int64_t run_id) {
  Statement query(db_, path_, "SELECT COUNT(*) FROM results WHERE run_id = ?1");
  query.bind(1, run_id);
  return query.step() ? query.int64(0) : 0;
}

// A label has one content within a run (run_eval refuses to mix them); MAX keeps that hash where a
// run begun before schema version 4 was resumed after it, its older rows having ''.
void ResultsStore::update_aggregates(int64_t run_id) {
  WriteTransaction transaction(db_, path_);
  Statement clear(db_, path_, "DELETE FROM aggregates WHERE run_id = ?1");
  clear.bind(1, run_id).run();
  Statement fill(db_, path_,
                 "INSERT INTO aggregates (run_id, task, policy, budget, samples, score, kept_ratio, kv_bytes, "
                 "kv_bytes_full, ttft_ms, decode_tok_s, policy_hash, device_kv_bytes) "
                 "SELECT run_id, task, policy, budget, COUNT(*), AVG(score), AVG(kept_ratio), AVG(kv_bytes), "
                 "AVG(kv_bytes_full), AVG(ttft_ms), AVG(decode_tok_s), MAX(policy_hash), "
                 KVEVICT_AGGREGATE_DEVICE_KV_BYTES " FROM results "
                 "WHERE run_id = ?1 GROUP BY task, policy, budget");
  fill.bind(1, run_id).run();
  transaction.commit();
}

}  // namespace kvevict::evals
