#pragma once
// The write step of `kvevict merge` (evals/results_merge.h): copies rows between results databases
// table by table, whatever the schema version, so a new table or column needs no change here.
// Values travel as SQLite values (sqlite3_value), bound as parameters: nothing read from a file is
// pasted into SQL; table and column names (from the schema itself) are quoted as identifiers.
#include <cstdint>
#include <string>
#include <vector>

namespace kvevict::evals {

struct RunSource {
  std::string path;  // an input database (already migrated by ResultsStore)
  int64_t run_id = 0;
};

// In one IMMEDIATE transaction on `out`: inserts a whole run (shard '', status 'running', no owner,
// started_at `started_at`, every other runs column from runs[0]), then for each of `inputs` copies
// its rows of the tables without a run_id column (INSERT OR IGNORE) and, for each of `runs` in that
// input, its rows of the tables with one (run_id set to the new run; a sole INTEGER PRIMARY KEY
// column is left to the new row). runs, aggregates and sqlite_* tables are not copied. Returns the
// new run's id; throws RuntimeError (nothing written) when a database fails.
int64_t write_merged_run(const std::string& out, const std::vector<std::string>& inputs,
                         const std::vector<RunSource>& runs, const std::string& started_at);

}  // namespace kvevict::evals
