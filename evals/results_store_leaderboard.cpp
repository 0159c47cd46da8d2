// ResultsStore's leaderboard queries (contract in evals/results_store.h): the newest finished whole
// run per (model, task, policy content, budget), named by evals/policy_labels.h.
#include "evals/policy_labels.h"
#include "evals/results_store.h"
#include "evals/sqlite_statement.h"

namespace kvevict::evals {
namespace {

// Aggregates of the newest finished run per (model, task, policy name, policy hash, budget): the
// same name with another content is another row, the same content run again replaces its row.
constexpr const char* kLatestAggregates = R"SQL(
SELECT run_id, model, task, policy, policy_hash, budget, samples, score, kept_ratio, kv_bytes, kv_bytes_full,
       ttft_ms, decode_tok_s, scoring, prefill_attention, prefill, device_kv_bytes
FROM (
  SELECT a.*, r.model AS model, %SCORING% AS scoring, %PREFILL_ATTENTION% AS prefill_attention,
         %PREFILL% AS prefill, %DEVICE_KV_BYTES% AS device_kv_bytes,
         ROW_NUMBER() OVER (PARTITION BY r.model, a.task, a.policy, a.policy_hash, a.budget
                            ORDER BY r.finished_at DESC, r.id DESC) AS newest
  FROM aggregates a JOIN runs r ON r.id = a.run_id
  WHERE r.status = 'finished' AND r.shard = '' AND (?1 = '' OR a.task = ?1) AND (?2 = '' OR instr(r.model, ?2) > 0)
    AND (?3 = 0 OR r.id = ?3)
)
WHERE newest = 1
ORDER BY model, task, policy, policy_hash, budget
)SQL";

// Every (name, content) among the finished whole runs, whatever the filters: a label is the same in
// `leaderboard --task a` as in `leaderboard`, so `compare` takes what either printed.
constexpr const char* kPolicyContents = R"SQL(
SELECT DISTINCT a.policy, a.policy_hash FROM aggregates a JOIN runs r ON r.id = a.run_id
WHERE r.status = 'finished' AND r.shard = ''
)SQL";

}  // namespace

std::vector<AggregateRow> ResultsStore::leaderboard(const std::string& task, const std::string& model, int64_t run_id) {
  PolicyContents contents;
  {
    Statement query(db_, path_, kPolicyContents);
    while (query.step()) contents[query.text(0)].insert(query.text(1));
  }
  const auto labels = policy_display_labels(contents);
  std::string sql = kLatestAggregates;
  // A read-only store is not migrated: columns its version predates read as what such runs mean.
  sql.replace(sql.find("%SCORING%"), 9, schema_version() >= 5 ? "r.scoring" : "''");
  sql.replace(sql.find("%PREFILL_ATTENTION%"), 19, schema_version() >= 6 ? "r.prefill_attention" : "'own'");
  sql.replace(sql.find("%PREFILL%"), 9, schema_version() >= 7 ? "r.prefill" : "'shared'");
  sql.replace(sql.find("%DEVICE_KV_BYTES%"), 17, schema_version() >= 8 ? "a.device_kv_bytes" : "NULL");
  Statement query(db_, path_, sql.c_str());
  query.bind(1, task).bind(2, model).bind(3, run_id);
  std::vector<AggregateRow> rows;
  while (query.step()) {
    AggregateRow row;
    row.run_id = query.int64(0);
    row.model = query.text(1);
    row.task = query.text(2);
    row.policy_name = query.text(3);
    row.policy_hash = query.text(4);
    auto label = labels.find({row.policy_name, row.policy_hash});
    row.policy = label != labels.end() ? label->second : row.policy_name;
    row.budget = query.text(5);
    row.samples = query.int64(6);
    row.score = query.real(7);
    row.kept_ratio = query.real(8);
    row.kv_bytes = query.real(9);
    row.kv_bytes_full = query.real(10);
    row.ttft_ms = query.real(11);
    row.decode_tok_s = query.real(12);
    row.scoring = query.text(13);
    row.prefill_attention = query.text(14);
    row.prefill = query.text(15);
    if (!query.is_null(16)) row.device_kv_bytes = query.real(16);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<GridCell> ResultsStore::grid_cells(const std::string& task, const std::string& model) {
  std::vector<GridCell> cells;
  for (const auto& aggregate : leaderboard(task, model)) {
    Statement query(db_, path_,
                    "SELECT length, depth, AVG(score), COUNT(*) FROM results WHERE run_id = ?1 AND task = ?2 AND "
                    "policy = ?3 AND budget = ?4 GROUP BY length, depth ORDER BY length, depth");
    query.bind(1, aggregate.run_id).bind(2, aggregate.task).bind(3, aggregate.policy_name).bind(4, aggregate.budget);
    while (query.step()) {
      GridCell cell;
      cell.model = aggregate.model;
      cell.task = aggregate.task;
      cell.policy = aggregate.policy;
      cell.budget = aggregate.budget;
      cell.length = static_cast<int>(query.int64(0));
      cell.depth = query.real(1);
      cell.score = query.real(2);
      cell.samples = query.int64(3);
      cells.push_back(cell);
    }
  }
  return cells;
}

}  // namespace kvevict::evals
