#pragma once
// A small RAII wrapper over sqlite3_stmt: bind by position, step, read columns. Errors become
// RuntimeError naming the database file and SQLite's message.
#include <cstdint>
#include <cstring>
#include <string>

#include <sqlite3.h>

#include "core/util/error.h"

namespace kvevict::evals {

// SQLite's message plus the operating system's reason when there is one ("disk I/O error" alone
// does not say that the disk is full or the file system read-only).
inline std::string sqlite_error_text(sqlite3* db) {
  std::string text = sqlite3_errmsg(db);
  const int os_error = sqlite3_system_errno(db);
  if (os_error != 0 && (sqlite3_errcode(db) == SQLITE_IOERR || sqlite3_errcode(db) == SQLITE_FULL)) {
    text += std::string(" (") + std::strerror(os_error) + ")";
  }
  return text;
}

class Statement {
 public:
  Statement(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) fail("prepare");
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, const std::string& value) {
    check(sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
    return *this;
  }
  Statement& bind(int index, const char* value) { return bind(index, std::string(value)); }
  Statement& bind(int index, int64_t value) { check(sqlite3_bind_int64(stmt_, index, value)); return *this; }
  Statement& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Statement& bind(int index, double value) { check(sqlite3_bind_double(stmt_, index, value)); return *this; }
  Statement& bind_null(int index) { check(sqlite3_bind_null(stmt_, index)); return *this; }
  // Binds a copy of a value read from any connection (column(), below): copies rows generically,
  // whatever the column's type.
  Statement& bind(int index, const sqlite3_value* value) { check(sqlite3_bind_value(stmt_, index, value)); return *this; }

  // True while a row is available.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail("step");
    return false;
  }
  void run() { while (step()) {} }
  void reset() { sqlite3_reset(stmt_); sqlite3_clear_bindings(stmt_); }

  // The current row's value, valid until the next step() or reset().
  const sqlite3_value* column(int index) const { return sqlite3_column_value(stmt_, index); }
  int64_t int64(int column) const { return sqlite3_column_int64(stmt_, column); }
  double real(int column) const { return sqlite3_column_double(stmt_, column); }
  bool is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(stmt_, column);
    return value ? std::string(reinterpret_cast<const char*>(value), sqlite3_column_bytes(stmt_, column)) : std::string();
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
  }
  [[noreturn]] void fail(const char* what) {
    throw RuntimeError(path_ + ": database error (" + what + "): " + sqlite_error_text(db_));
  }
  sqlite3* db_;
  std::string path_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace kvevict::evals
