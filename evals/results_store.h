#pragma once
// The SQLite results store (default kvevict.db). WAL mode and a busy timeout let several `kvevict
// eval` processes write one file at once; every write is one IMMEDIATE transaction. The schema
// version lives in PRAGMA user_version and is migrated forward on open (evals/results_schema.h).
// Every statement is parameterised: nothing from a config or a model is pasted into SQL.
//
// Tables:
//   runs(id, name, config_hash, config_yaml, kvevict_version, git_commit, model, model_hash,
//        device, seed, started_at, finished_at, status running|finished|failed,
//        reason (why it failed), owner (the writing process: "pid:start time", NULL when none),
//        shard ("" = every sample, "I/N" = shard I of N; the leaderboard shows only whole runs),
//        scoring (the policies' scoring backend; '' before version 5), prefill_attention (own |
//        flashinfer: the decoder's prefill attention; 'own' for runs from before version 6),
//        prefill (shared | per_run: the resolved `prefill:` mode; 'shared' before version 7))
//   results(id, run_id, task, sample_key, policy, budget, ..., policy_hash, prompt_hash ;
//           UNIQUE(run_id, task, sample_key, policy, budget))
//   aggregates(run_id, task, policy, budget, samples, score, ..., policy_hash, device_kv_bytes
//              (NULL where some sample did not measure it: CPU runs, runs before version 8) ;
//              PRIMARY KEY(run_id, task, policy, budget))
//   policies(hash PRIMARY KEY, name, label, source, params_json)       content, evals/stored_content.h
//   prompts(hash PRIMARY KEY, prefill, tail, continuation, sample_json)
// Per-run data lives in tables with a run_id column; content tables have none and are keyed by
// the SHA-256 of what they hold (a merge copies them with INSERT OR IGNORE). Rows written before
// schema version 4 have policy_hash = prompt_hash = ''.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "evals/stored_content.h"

struct sqlite3;

namespace kvevict::evals {

struct RunRecord {
  int64_t id = 0;
  std::string name, config_hash, config_yaml, kvevict_version, git_commit, model, model_hash, device;
  uint64_t seed = 0;
  std::string started_at, finished_at, status;
  std::string reason;  // why a failed run failed
  std::string shard;   // "" = every sample of the config; "I/N" = shard I of N (evals/shard.h)
  std::string scoring;  // the scoring backend of every result of the run ("": not recorded, schema < 5)
  // The decoder's prefill attention (ModeNames<PrefillAttention>: own, flashinfer); "own" for runs
  // from before schema version 6, which could not choose it.
  std::string prefill_attention = "own";
  // The resolved `prefill:` mode (ModeNames<PrefillMode>: shared, per_run); "shared" for runs from
  // before schema version 7, which all evicted one shared prefill.
  std::string prefill = "shared";
};

struct SampleResult {
  int64_t id = 0, run_id = 0;  // read back from the store (ignored by insert_results)
  std::string task, sample_key, policy, budget;
  int length = 0;
  double depth = -1;
  int sample_index = 0;
  std::string grid_json = "{}";
  bool query_aware = false;
  std::string prediction;
  std::string reference;  // JSON array of the references
  double score = 0;       // 0-100
  double kept_ratio = 1;
  int64_t kv_bytes = 0, kv_bytes_full = 0;
  double ttft_ms = 0, decode_tok_s = 0;
  std::string extra_json = "{}";
  std::string policy_hash, prompt_hash;  // PolicySource::hash, StoredPrompt::hash; '' before schema 4
};

struct AggregateRow {
  int64_t run_id = 0;
  std::string model, task;
  std::string policy;       // the leaderboard's name for it (evals/policy_labels.h): policy_name,
                            // plus "@" and a hash prefix where one name has several contents
  std::string policy_name;  // the results' policy label
  std::string policy_hash;  // '' for rows written before schema version 4
  std::string budget;
  int64_t samples = 0;
  double score = 0, kept_ratio = 0, kv_bytes = 0, kv_bytes_full = 0, ttft_ms = 0, decode_tok_s = 0;
  // What the device held for the cache after the eviction (entries and SpindleKV's books: the
  // results' extra_json kv_bytes_on_device + codebook_bytes_on_device), mean over the samples; NaN
  // where some sample did not measure it (a CPU run, a run from before schema version 8).
  double device_kv_bytes = std::numeric_limits<double>::quiet_NaN();
  std::string scoring;  // the run's scoring backend (RunRecord::scoring; '' before schema version 5)
  std::string prefill_attention = "own";  // the run's (RunRecord::prefill_attention)
  std::string prefill = "shared";         // the run's (RunRecord::prefill)
};

// Mean score of one (task, policy, budget, length, depth) cell: needle heatmaps.
struct GridCell {
  std::string model, task, policy, budget;
  int length = 0;
  double depth = 0;
  double score = 0;
  int64_t samples = 0;
};

class ResultsStore {
 public:
  static constexpr int kSchemaVersion = 8;
  enum class Access { ReadWrite, ReadOnly };

  // Opens or creates `path` and migrates it. Throws UsageError when the path cannot persist
  // (empty, ":memory:", a "file:" URI, a directory or other non-regular file), RuntimeError naming
  // the file on failure, or when its schema version is newer than this build or negative.
  // ReadOnly opens an existing file without creating, migrating or writing anything (kvevict
  // replay): its schema_version() may be older than kSchemaVersion, and then only runs() and
  // run() may be read.
  explicit ResultsStore(const std::string& path, Access access = Access::ReadWrite);
  ~ResultsStore();
  ResultsStore(const ResultsStore&) = delete;
  ResultsStore& operator=(const ResultsStore&) = delete;

  int schema_version();
  const std::string& path() const { return path_; }
  // The newest run with this identity (config, model, shard) and status ("finished", "running",
  // "failed", or "unfinished": running or failed).
  std::optional<RunRecord> find_run(const std::string& config_hash, const std::string& model_hash,
                                    const std::string& status, const std::string& shard = "");
  std::optional<RunRecord> run(int64_t id);
  std::vector<RunRecord> runs();
  // Status "running", started_at now, owned by this process. create_run and claim_run throw
  // RuntimeError when the database is read-only (file, folder or mount), before writing anything.
  int64_t create_run(const RunRecord& record);
  // Sets status ("finished" or "failed", with the reason) and releases ownership.
  void finish_run(int64_t id, const std::string& status, const std::string& reason = "");
  // Makes this process the run's writer (status "running", reason cleared) before a resume. Throws
  // RuntimeError naming the other process when a live process owns it already; the owner of a
  // killed process is taken over (its pid and start time no longer match a running process).
  void claim_run(int64_t id);
  // Keys "task\x1fsample_key\x1fpolicy\x1fbudget" already stored for a run.
  std::set<std::string> completed_keys(int64_t run_id);
  static std::string result_key(const std::string& task, const std::string& sample_key, const std::string& policy,
                                const std::string& budget);
  // Inserts all rows, and the prompts they name (INSERT OR IGNORE: one row per content), in one
  // transaction (all or nothing). A row whose key exists is an error.
  void insert_results(int64_t run_id, const std::vector<SampleResult>& rows,
                      const std::vector<StoredPrompt>& prompts = {});
  // Records policies by content (INSERT OR IGNORE), in one transaction.
  void insert_policies(const std::vector<PolicySource>& policies);
  int64_t count_results(int64_t run_id);
  std::vector<SampleResult> results(int64_t run_id);
  std::optional<SampleResult> result(int64_t id);
  std::optional<PolicySource> policy(const std::string& hash);
  std::optional<StoredPrompt> prompt(const std::string& hash);
  // Label -> policy hash of the run's results that have one (a run's label has one content).
  std::map<std::string, std::string> run_policy_hashes(int64_t run_id);
  // Recomputes the run's aggregates from its results.
  void update_aggregates(int64_t run_id);

  // The newest finished whole run's aggregate for each (model, task, policy label, policy hash,
  // budget), named as evals/policy_labels.h says (over every finished run, whatever the filters);
  // filters match when empty; `model` matches any run whose model path contains it.
  std::vector<AggregateRow> leaderboard(const std::string& task = "", const std::string& model = "",
                                        int64_t run_id = 0);
  // Per-(length, depth) means of the same runs the leaderboard picks.
  std::vector<GridCell> grid_cells(const std::string& task = "", const std::string& model = "");

 private:
  // The runs columns later versions added ("scoring, prefill_attention, prefill"), each a constant of what
  // runs before it mean where the schema predates it (a read-only store is not migrated).
  std::string run_added_columns();
  void exec(const char* sql);
  void migrate();
  void require_writable();  // RuntimeError when SQLite opened the file read-only
  void open(Access access);
  void enable_wal();  // PRAGMA journal_mode=WAL, retried while another process holds the file
  void check_version(int version);  // RuntimeError for a version newer than this build, or negative
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace kvevict::evals
