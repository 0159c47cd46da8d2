// ResultsStore's result rows and content tables (contract in evals/results_store.h).
#include "evals/results_store.h"
#include "evals/sqlite_statement.h"
#include "evals/sqlite_transaction.h"

namespace kvevict::evals {
namespace {

constexpr const char* kResultColumns =
    "id, run_id, task, sample_key, policy, budget, length, depth, sample_index, grid_json, query_aware, prediction, "
    "reference, score, kept_ratio, kv_bytes, kv_bytes_full, ttft_ms, decode_tok_s, extra_json, policy_hash, "
    "prompt_hash";

SampleResult read_result(const Statement& query) {
  SampleResult r;
  r.id = query.int64(0);
  r.run_id = query.int64(1);
  r.task = query.text(2);
  r.sample_key = query.text(3);
  r.policy = query.text(4);
  r.budget = query.text(5);
  r.length = static_cast<int>(query.int64(6));
  r.depth = query.real(7);
  r.sample_index = static_cast<int>(query.int64(8));
  r.grid_json = query.text(9);
  r.query_aware = query.int64(10) != 0;
  r.prediction = query.text(11);
  r.reference = query.text(12);
  r.score = query.real(13);
  r.kept_ratio = query.real(14);
  r.kv_bytes = query.int64(15);
  r.kv_bytes_full = query.int64(16);
  r.ttft_ms = query.real(17);
  r.decode_tok_s = query.real(18);
  r.extra_json = query.text(19);
  r.policy_hash = query.text(20);
  r.prompt_hash = query.text(21);
  return r;
}

}  // namespace

std::vector<SampleResult> ResultsStore::results(int64_t run_id) {
  const std::string sql = std::string("SELECT ") + kResultColumns + " FROM results WHERE run_id = ?1 ORDER BY id";
  Statement query(db_, path_, sql.c_str());
  query.bind(1, run_id);
  std::vector<SampleResult> rows;
  while (query.step()) rows.push_back(read_result(query));
  return rows;
}

std::optional<SampleResult> ResultsStore::result(int64_t id) {
  const std::string sql = std::string("SELECT ") + kResultColumns + " FROM results WHERE id = ?1";
  Statement query(db_, path_, sql.c_str());
  query.bind(1, id);
  if (!query.step()) return std::nullopt;
  return read_result(query);
}

void ResultsStore::insert_policies(const std::vector<PolicySource>& policies) {
  if (policies.empty()) return;
  require_writable();
  WriteTransaction transaction(db_, path_);
  Statement insert(db_, path_,
                   "INSERT OR IGNORE INTO policies (hash, name, label, source, params_json) VALUES (?1, ?2, ?3, ?4, ?5)");
  for (const auto& policy : policies) {
    insert.reset();
    insert.bind(1, policy.hash).bind(2, policy.name).bind(3, policy.label).bind(4, policy.text);
    insert.bind(5, policy.params_json).run();
  }
  transaction.commit();
}

std::optional<PolicySource> ResultsStore::policy(const std::string& hash) {
  Statement query(db_, path_, "SELECT hash, name, label, source, params_json FROM policies WHERE hash = ?1");
  query.bind(1, hash);
  if (!query.step()) return std::nullopt;
  return PolicySource{query.text(1), query.text(2), query.text(3), query.text(4), query.text(0)};
}

std::optional<StoredPrompt> ResultsStore::prompt(const std::string& hash) {
  Statement query(db_, path_, "SELECT hash, prefill, tail, continuation, sample_json FROM prompts WHERE hash = ?1");
  query.bind(1, hash);
  if (!query.step()) return std::nullopt;
  StoredPrompt prompt;
  prompt.hash = query.text(0);
  prompt.text.prefill = query.text(1);
  prompt.text.tail = query.text(2);
  prompt.text.continuation = query.text(3);
  prompt.sample_json = query.text(4);
  return prompt;
}

std::map<std::string, std::string> ResultsStore::run_policy_hashes(int64_t run_id) {
  Statement query(db_, path_,
                  "SELECT DISTINCT policy, policy_hash FROM results WHERE run_id = ?1 AND policy_hash != ''");
  query.bind(1, run_id);
  std::map<std::string, std::string> hashes;
  while (query.step()) hashes[query.text(0)] = query.text(1);
  return hashes;
}

}  // namespace kvevict::evals
