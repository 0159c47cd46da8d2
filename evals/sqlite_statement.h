#pragma once
// A small RAII wrapper over sqlite3_stmt: bind by position, step, read columns. Errors become
// RuntimeError naming the database file and SQLite's message.
#include <cstdint>
#include <string>

#include <sqlite3.h>

#include "core/util/error.h"

namespace kvevict::evals {

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

  int64_t int64(int column) const { return sqlite3_column_int64(stmt_, column); }
  double real(int column) const { return sqlite3_column_double(stmt_, column); }
  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(stmt_, column);
    return value ? std::string(reinterpret_cast<const char*>(value), sqlite3_column_bytes(stmt_, column)) : std::string();
  }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) fail("bind");
  }
  [[noreturn]] void fail(const char* what) {
    throw RuntimeError(path_ + ": database error (" + what + "): " + sqlite3_errmsg(db_));
  }
  sqlite3* db_;
  std::string path_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace kvevict::evals
