#include "evals/results_schema.h"

#include <iterator>

namespace kvevict::evals {
namespace {

// Migrations: entry i moves the schema from version i to i + 1.
const char* const kMigrations[] = {
    R"SQL(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  config_hash TEXT NOT NULL,
  config_yaml TEXT NOT NULL,
  kvevict_version TEXT NOT NULL,
  git_commit TEXT NOT NULL,
  model TEXT NOT NULL,
  model_hash TEXT NOT NULL,
  device TEXT NOT NULL,
  seed INTEGER NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed'))
);
CREATE INDEX runs_identity ON runs(config_hash, model_hash, status);
CREATE TABLE results (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id),
  task TEXT NOT NULL,
  sample_key TEXT NOT NULL,
  policy TEXT NOT NULL,
  budget TEXT NOT NULL,
  length INTEGER NOT NULL,
  depth REAL NOT NULL,
  sample_index INTEGER NOT NULL,
  grid_json TEXT NOT NULL,
  query_aware INTEGER NOT NULL,
  prediction TEXT NOT NULL,
  reference TEXT NOT NULL,
  score REAL NOT NULL,
  kept_ratio REAL NOT NULL,
  kv_bytes INTEGER NOT NULL,
  kv_bytes_full INTEGER NOT NULL,
  ttft_ms REAL NOT NULL,
  decode_tok_s REAL NOT NULL,
  extra_json TEXT NOT NULL,
  created_at TEXT NOT NULL,
  UNIQUE (run_id, task, sample_key, policy, budget)
);
CREATE TABLE aggregates (
  run_id INTEGER NOT NULL REFERENCES runs(id),
  task TEXT NOT NULL,
  policy TEXT NOT NULL,
  budget TEXT NOT NULL,
  samples INTEGER NOT NULL,
  score REAL NOT NULL,
  kept_ratio REAL NOT NULL,
  kv_bytes REAL NOT NULL,
  kv_bytes_full REAL NOT NULL,
  ttft_ms REAL NOT NULL,
  decode_tok_s REAL NOT NULL,
  PRIMARY KEY (run_id, task, policy, budget)
);
)SQL",
    // 2: why a run failed, and which process is writing it (so two `--resume` of one run cannot
    // both write it: the second is refused with the first one's pid).
    R"SQL(
ALTER TABLE runs ADD COLUMN reason TEXT;
ALTER TABLE runs ADD COLUMN owner TEXT;
)SQL",
    // 3: which part of the samples a run covers ("" = all of them; "I/N" = shard I of N, see
    // evals/shard.h). A shard's results are only a part: the leaderboard shows whole runs only.
    R"SQL(
ALTER TABLE runs ADD COLUMN shard TEXT NOT NULL DEFAULT '';
)SQL",
    // 4: replayable, attributable results. Content tables keyed by the SHA-256 of what they hold
    // (evals/stored_content.h): a policy's exact source text with its resolved parameters, and the
    // exact prompt text the model saw with the sample fields decoding and scoring read. Each result
    // names both; rows written before version 4 keep '' (they display, but cannot be replayed).
    R"SQL(
CREATE TABLE policies (
  hash TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  label TEXT NOT NULL,
  source TEXT NOT NULL,
  params_json TEXT NOT NULL
);
CREATE TABLE prompts (
  hash TEXT PRIMARY KEY,
  prefill TEXT NOT NULL,
  tail TEXT NOT NULL,
  continuation TEXT NOT NULL,
  sample_json TEXT NOT NULL
);
ALTER TABLE results ADD COLUMN policy_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE results ADD COLUMN prompt_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE aggregates ADD COLUMN policy_hash TEXT NOT NULL DEFAULT '';
)SQL",
    // 5: how the run's policies were scored (jit/scoring_backend.h: interpreter, host or cuda),
    // chosen once per run. Runs written before version 5 keep '' (not recorded).
    R"SQL(
ALTER TABLE runs ADD COLUMN scoring TEXT NOT NULL DEFAULT '';
)SQL",
    // 6: the decoder's prefill attention (core/decode/decoder.h: own or flashinfer, eval's
    // `prefill_attention:`): FlashInfer rounds to 16 bits, so results differ by it. Runs written
    // before version 6 could not choose it and ran own, so the default records what they ran.
    R"SQL(
ALTER TABLE runs ADD COLUMN prefill_attention TEXT NOT NULL DEFAULT 'own';
)SQL",
    // 7: the resolved `prefill:` mode (evals/config.h: shared or per_run): per_run evicts each
    // run's own prefill, so results differ by it. Runs written before version 7 all evicted the
    // one shared prefill, so the default records what they ran.
    R"SQL(
ALTER TABLE runs ADD COLUMN prefill TEXT NOT NULL DEFAULT 'shared';
)SQL",
    // 8: what the device held for the cache after the eviction (CUDA runs, which since version 7
    // record it per result in extra_json): NULL where not measured; back-filled from the results.
    R"SQL(
ALTER TABLE aggregates ADD COLUMN device_kv_bytes REAL;
UPDATE aggregates SET device_kv_bytes = (
  SELECT )SQL" KVEVICT_AGGREGATE_DEVICE_KV_BYTES R"SQL( FROM results r
  WHERE r.run_id = aggregates.run_id AND r.task = aggregates.task AND r.policy = aggregates.policy
    AND r.budget = aggregates.budget);
)SQL",
};

}  // namespace

const char* const* schema_migrations(size_t& count) {
  count = std::size(kMigrations);
  return kMigrations;
}

}  // namespace kvevict::evals
