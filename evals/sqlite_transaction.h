#pragma once
// The results store's write transaction, shared by its source files (evals/results_store*.cpp).
#include <string>

#include <sqlite3.h>

#include "core/util/error.h"
#include "evals/sqlite_statement.h"

namespace kvevict::evals {

// " (<strerror>)" when the last SQLite error came with an operating-system error, else "".
inline std::string sqlite_os_reason(sqlite3* db) {
  std::string full = sqlite_error_text(db), plain = sqlite3_errmsg(db);
  return full.size() > plain.size() ? full.substr(plain.size()) : "";
}

// Runs `sql`; RuntimeError naming `path` with SQLite's message on failure.
inline void sqlite_exec(sqlite3* db, const std::string& path, const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message ? message : "unknown error";
    sqlite3_free(message);
    throw RuntimeError(path + ": database error: " + text + sqlite_os_reason(db));
  }
}

// RAII IMMEDIATE transaction: takes the write lock up front so concurrent writers queue on the busy
// timeout instead of failing on lock upgrade. Rolled back unless committed.
class WriteTransaction {
 public:
  WriteTransaction(sqlite3* db, const std::string& path) : db_(db), path_(path) {
    sqlite_exec(db_, path_, "BEGIN IMMEDIATE");
  }
  ~WriteTransaction() {
    if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  WriteTransaction(const WriteTransaction&) = delete;
  WriteTransaction& operator=(const WriteTransaction&) = delete;
  void commit() {
    sqlite_exec(db_, path_, "COMMIT");
    committed_ = true;
  }

 private:
  sqlite3* db_;
  const std::string& path_;
  bool committed_ = false;
};

}  // namespace kvevict::evals
