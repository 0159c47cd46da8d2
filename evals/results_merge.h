#pragma once
// `kvevict merge OUT.db IN.db...`: joins the shard runs of one config and model (evals/shard.h)
// into one whole run in OUT.db, holding row for row what an unsharded run of the config stores.
//
// Inputs. Each IN.db must exist (a missing one is never created) and is opened through ResultsStore
// first, which migrates it to this build's schema: every file then has the same tables. Every run in
// the inputs must be of one config and one model (config_hash, model_hash); a whole run (shard "")
// counts as shard 0/1, so merging whole runs copies one. Refused with UsageError (exit 2) before OUT
// is opened, so OUT is untouched (not even created):
//   - an input that does not exist, holds no run, or is OUT itself;
//   - runs of different configs or models, scoring backends, prefill attentions or prefill modes;
//   - shards of different counts N;
//   - a shard with no finished run: missing (every missing shard is named) or unfinished (its
//     file, run, status and reason);
//   - one shard finished twice (any files) with different results;
//   - one result key in two shards (not a partition kvevict made).
// An unfinished run of a shard that also has a finished run is superseded: noted, not copied.
// Results are compared on every column except the timing ones (ttft_ms, decode_tok_s) and
// extra_json (it holds evict_ms): one config and model give the same predictions, scores and bytes
// on every run, not the same times.
//
// Output. One run with shard "", status finished, the identity and provenance (name, config YAML,
// version, commit, model, device, seed) of shard 0's run, started_at the earliest shard's start and
// finished_at the merge's time. Tables are copied generically, so a later schema version needs no
// change here; for every table of OUT's schema except runs, aggregates and sqlite_* internals:
//   - with a run_id column: every row of each shard's chosen run, every column except a sole
//     INTEGER PRIMARY KEY (the rowid), run_id set to the merged run;
//   - without one (content tables keyed by a hash): INSERT OR IGNORE of every row of every input.
// The run and all its rows are written in one transaction (a failure leaves none of them), then the
// aggregates are recomputed (ResultsStore::update_aggregates) and the run is marked finished.
//
// Idempotent: when OUT already holds a finished whole run of this config and model with exactly
// these results, nothing is written (Outcome::Unchanged); one with other results is refused (exit 2,
// nothing written). An unfinished whole run of this identity holding exactly these results (a merge
// interrupted between its transaction and the aggregates) is completed, not duplicated. Two merges
// into one OUT at the same moment may each write a run: run them one after the other.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvevict::evals {

struct MergeSummary {
  enum class Outcome { Merged, Unchanged, Completed };
  Outcome outcome = Outcome::Merged;
  int64_t run_id = 0;   // the whole run in OUT
  int shards = 0;       // N
  int64_t results = 0;  // rows of the merged run
  std::string name;     // the run's name
};

// Throws UsageError for the refusals above, InputError for a missing input, RuntimeError when a
// database fails. `note` receives one-line messages (superseded runs, a repeated input).
MergeSummary merge_results(const std::string& out, const std::vector<std::string>& inputs,
                           const std::function<void(const std::string&)>& note = {});

}  // namespace kvevict::evals
