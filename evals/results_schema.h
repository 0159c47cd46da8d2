#pragma once
// The results store's schema as forward migrations: entry i moves a database from schema version i
// to i + 1 (PRAGMA user_version). Append-only: a released entry is never edited, so a database of
// version v is exactly entries 0..v-1 applied (tests build old databases that way).
//
// Version 4 adds content tables keyed by SHA-256 (no run_id: a merge copies them with INSERT OR
// IGNORE) and per-result references to them:
//   policies(hash PRIMARY KEY, name, label, source, params_json)   evals/stored_content.h
//   prompts(hash PRIMARY KEY, prefill, tail, continuation, sample_json)
//   results.policy_hash, results.prompt_hash, aggregates.policy_hash ('' in rows written before v4)
#include <cstddef>

namespace kvevict::evals {

// The migrations, oldest first; `count` receives how many there are (= the newest version).
const char* const* schema_migrations(size_t& count);

}  // namespace kvevict::evals
