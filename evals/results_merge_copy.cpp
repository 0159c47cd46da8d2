#include "evals/results_merge_copy.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "core/util/error.h"
#include "evals/sqlite_statement.h"

namespace kvevict::evals {
namespace {

// A plain connection: ResultsStore has opened (and so migrated) every file before the copy starts.
class Connection {
 public:
  Connection(const std::string& path, bool writable) : path_(path) {  // writable: the merge writes here
    // Inputs are only read, yet opened read-write: the last connection to close a WAL database
    // checkpoints it and removes its -wal and -shm files, which a read-only one cannot do.
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
      const std::string message = db_ ? sqlite_error_text(db_) : "out of memory";
      sqlite3_close(db_);
      throw RuntimeError(path + ": cannot open the results database: " + message);
    }
    sqlite3_busy_timeout(db_, 60000);  // as ResultsStore: wait for another writer instead of failing
    if (writable) {
      try {
        exec("PRAGMA foreign_keys=ON");
      } catch (...) {
        sqlite3_close(db_);
        throw;
      }
    }
  }
  ~Connection() { sqlite3_close(db_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  void exec(const char* sql) {
    char* message = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string text = message ? message : sqlite_error_text(db_);
      sqlite3_free(message);
      throw RuntimeError(path_ + ": database error: " + text);
    }
  }

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

// IMMEDIATE: the write lock is taken up front, as ResultsStore does; rolled back unless committed.
class Transaction {
 public:
  explicit Transaction(Connection& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }
  ~Transaction() {
    if (!committed_) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  void commit() {
    db_.exec("COMMIT");
    committed_ = true;
  }

 private:
  Connection& db_;
  bool committed_ = false;
};

std::string quoted(const std::string& identifier) {
  std::string text = "\"";
  for (char c : identifier) text += c == '"' ? std::string("\"\"") : std::string(1, c);
  return text + "\"";
}

struct Table {
  std::string name;
  std::vector<std::string> columns;  // the columns copied, in order
  int run_id = -1;                   // position of run_id in `columns`; -1: a content table
};

// `name`'s columns; with `drop_rowid`, without a sole INTEGER PRIMARY KEY column (an alias of the
// rowid: the new row gets its own).
std::vector<std::string> table_columns(const Connection& db, const std::string& name, bool drop_rowid) {
  Statement info(db.get(), db.path(), "SELECT name, upper(type), pk FROM pragma_table_info(?1) ORDER BY cid");
  info.bind(1, name);
  std::vector<std::string> columns;
  std::string rowid_alias;
  int primary_keys = 0;
  while (info.step()) {
    columns.push_back(info.text(0));
    if (info.int64(2) > 0) {
      ++primary_keys;
      if (info.text(1) == "INTEGER") rowid_alias = info.text(0);
    }
  }
  if (drop_rowid && primary_keys == 1 && !rowid_alias.empty()) {
    std::erase(columns, rowid_alias);
  }
  return columns;
}

// The tables a merge copies, in creation order (a table is created after those it references).
std::vector<Table> copied_tables(const Connection& db) {
  Statement list(db.get(), db.path(),
                 "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                 "AND name NOT IN ('runs', 'aggregates') ORDER BY rowid");
  std::vector<Table> tables;
  while (list.step()) {
    Table table{list.text(0), {}, -1};
    std::vector<std::string> all = table_columns(db, table.name, false);
    const bool per_run = std::find(all.begin(), all.end(), "run_id") != all.end();
    table.columns = per_run ? table_columns(db, table.name, true) : all;
    if (per_run) table.run_id = static_cast<int>(std::find(table.columns.begin(), table.columns.end(), "run_id") - table.columns.begin());
    tables.push_back(std::move(table));
  }
  return tables;
}

std::string column_list(const std::vector<std::string>& columns) {
  std::string text;
  for (const std::string& column : columns) text += (text.empty() ? "" : ", ") + quoted(column);
  return text;
}

std::string insert_sql(const std::string& table, const std::vector<std::string>& columns, bool or_ignore) {
  std::string values;
  for (size_t i = 1; i <= columns.size(); ++i) values += (i > 1 ? ", ?" : "?") + std::to_string(i);
  return std::string("INSERT ") + (or_ignore ? "OR IGNORE " : "") + "INTO main." + quoted(table) + " (" +
         column_list(columns) + ") VALUES (" + values + ")";
}

// Copies `table`'s rows from `in` to `out`: all of them (INSERT OR IGNORE) for a content table,
// else those of run `run->first`, stored under run `run->second`.
void copy_rows(Connection& out, const Connection& in, const Table& table,
               std::optional<std::pair<int64_t, int64_t>> run) {
  std::string select = "SELECT " + column_list(table.columns) + " FROM main." + quoted(table.name);
  if (run) select += " WHERE " + quoted("run_id") + " = ?1";
  Statement rows(in.get(), in.path(), select.c_str());
  if (run) rows.bind(1, run->first);
  Statement insert(out.get(), out.path(), insert_sql(table.name, table.columns, !run).c_str());
  while (rows.step()) {
    insert.reset();
    for (int c = 0; c < static_cast<int>(table.columns.size()); ++c) {
      if (run && c == table.run_id) {
        insert.bind(c + 1, run->second);
      } else {
        insert.bind(c + 1, rows.column(c));
      }
    }
    insert.run();
  }
}

// The merged run's row: runs[0]'s columns (whatever this schema has) with the whole-run identity.
int64_t insert_run(Connection& out, const Connection& in, int64_t source_id, const std::string& started_at) {
  const std::vector<std::string> columns = table_columns(out, "runs", true);
  const std::map<std::string, std::optional<std::string>> overrides = {
      {"shard", ""}, {"status", "running"}, {"owner", std::nullopt}, {"reason", std::nullopt},
      {"finished_at", std::nullopt}, {"started_at", started_at}};
  const std::string select = "SELECT " + column_list(columns) + " FROM main.runs WHERE id = ?1";
  Statement source(in.get(), in.path(), select.c_str());
  source.bind(1, source_id);
  if (!source.step()) throw RuntimeError(in.path() + ": run #" + std::to_string(source_id) + " disappeared during the merge");
  Statement insert(out.get(), out.path(), insert_sql("runs", columns, false).c_str());
  for (int c = 0; c < static_cast<int>(columns.size()); ++c) {
    auto override_value = overrides.find(columns[c]);
    if (override_value == overrides.end()) {
      insert.bind(c + 1, source.column(c));
    } else if (override_value->second) {
      insert.bind(c + 1, *override_value->second);
    } else {
      insert.bind_null(c + 1);
    }
  }
  insert.run();
  return sqlite3_last_insert_rowid(out.get());
}

}  // namespace

int64_t write_merged_run(const std::string& out_path, const std::vector<std::string>& inputs,
                         const std::vector<RunSource>& runs, const std::string& started_at) {
  if (runs.empty()) throw RuntimeError(out_path + ": a merge needs at least one run");
  Connection out(out_path, true);
  const std::vector<Table> tables = copied_tables(out);
  Transaction transaction(out);
  int64_t id = 0;
  {
    const Connection first(runs[0].path, false);
    id = insert_run(out, first, runs[0].run_id, started_at);
  }
  for (const std::string& path : inputs) {
    const Connection in(path, false);
    // Content tables first: a per-run row may reference one of their rows.
    for (const Table& table : tables) {
      if (table.run_id < 0) copy_rows(out, in, table, std::nullopt);
    }
    for (const RunSource& run : runs) {
      if (run.path != path) continue;
      for (const Table& table : tables) {
        if (table.run_id >= 0) copy_rows(out, in, table, std::make_pair(run.run_id, id));
      }
    }
  }
  transaction.commit();
  return id;
}

}  // namespace kvevict::evals
