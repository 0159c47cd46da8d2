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

// An aggregate's device_kv_bytes (version 8), an SQL expression over a group of `results` rows:
// the mean over the samples of what the device held for the cache after the eviction (the
// evaluator's extra_json kv_bytes_on_device, plus codebook_bytes_on_device where present), NULL
// unless every sample of the group measured it (a CPU run never does). A row whose extra_json is
// not valid JSON or holds no number there counts as not measured, never as 0. Written once here
// for update_aggregates and version 8's back-fill; a macro so the migration's literal can hold it.
#define KVEVICT_RESULT_DEVICE_KV_BYTES                                                              \
  "(CASE WHEN json_valid(extra_json) AND "                                                          \
  "json_type(extra_json, '$.kv_bytes_on_device') IN ('integer', 'real') "                           \
  "THEN json_extract(extra_json, '$.kv_bytes_on_device') + "                                        \
  "(CASE WHEN json_type(extra_json, '$.codebook_bytes_on_device') IN ('integer', 'real') "          \
  "THEN json_extract(extra_json, '$.codebook_bytes_on_device') ELSE 0 END) END)"
#define KVEVICT_AGGREGATE_DEVICE_KV_BYTES                                                           \
  "(CASE WHEN COUNT(" KVEVICT_RESULT_DEVICE_KV_BYTES ") = COUNT(*) THEN AVG(" KVEVICT_RESULT_DEVICE_KV_BYTES ") END)"

namespace kvevict::evals {

// The migrations, oldest first; `count` receives how many there are (= the newest version).
const char* const* schema_migrations(size_t& count);

}  // namespace kvevict::evals
