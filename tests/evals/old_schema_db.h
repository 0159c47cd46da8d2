#pragma once
// A results database exactly as an older kvevict wrote it: the schema migrations 0..version-1
// applied raw (they are append-only, so that is the old schema), then one finished run with two
// results and their aggregate inserted with the columns that version had. For the migration tests
// and for `kvevict replay` on a pre-version-4 database.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "evals/results_schema.h"

namespace kvevict::evals::test {

inline void exec_sql(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK) << (message ? message : "") << "\n"
                                                                                 << sql;
  sqlite3_free(message);
}

// Run #1 "old" (model m.gguf, finished), task needle, policy `policy`, budget 25%: samples k1 (score
// 100) and k2 (score 50), and their aggregate.
inline void write_old_database(const std::string& path, int version, const std::string& policy = "snapkv") {
  size_t count = 0;
  const char* const* migrations = schema_migrations(count);
  ASSERT_LE(static_cast<size_t>(version), count);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (int v = 0; v < version; ++v) exec_sql(db, migrations[v]);
  const std::string extra_run_columns = version >= 3 ? ", reason, owner, shard" : version >= 2 ? ", reason, owner" : "";
  const std::string extra_run_values = version >= 3 ? ", NULL, NULL, ''" : version >= 2 ? ", NULL, NULL" : "";
  exec_sql(db, "INSERT INTO runs (name, config_hash, config_yaml, kvevict_version, git_commit, model, model_hash, "
               "device, seed, started_at, finished_at, status" + extra_run_columns + ") VALUES ('old', 'cfg', "
               "'name: old\n', '0.1', 'abc', 'm.gguf', 'mh', 'cpu', 0, '2024-01-01T00:00:00.000Z', "
               "'2024-01-01T00:01:00.000Z', 'finished'" + extra_run_values + ")");
  for (const auto& [key, score] : {std::pair{"k1", "100"}, std::pair{"k2", "50"}}) {
    exec_sql(db, std::string("INSERT INTO results (run_id, task, sample_key, policy, budget, length, depth, "
                             "sample_index, grid_json, query_aware, prediction, reference, score, kept_ratio, "
                             "kv_bytes, kv_bytes_full, ttft_ms, decode_tok_s, extra_json, created_at) VALUES (1, "
                             "'needle', '") + key + "', '" + policy + "', '25%', 100, 50, 0, '{}', 0, 'the answer', "
                             "'[\"the answer\"]', " + score + ", 0.25, 250, 1000, 1.5, 100, '{}', "
                             "'2024-01-01T00:00:30.000Z')");
  }
  exec_sql(db, "INSERT INTO aggregates (run_id, task, policy, budget, samples, score, kept_ratio, kv_bytes, "
               "kv_bytes_full, ttft_ms, decode_tok_s) VALUES (1, 'needle', '" + policy + "', '25%', 2, 75, 0.25, "
               "250, 1000, 1.5, 100)");
  exec_sql(db, "PRAGMA user_version=" + std::to_string(version));
  sqlite3_close(db);
}

}  // namespace kvevict::evals::test
