#pragma once
// Error collection for policy files. Every error carries a position in the policy FILE (1-based
// line and column), so DSL text embedded in YAML is reported where the user typed it. Errors are
// collected, never thrown one by one, so a file's every mistake is reported in one run.
#include <string>
#include <vector>

namespace kvevict::dsl {

struct FilePos {
  int line = 0;  // 1-based; 0 = unknown (the message then has no line:col and no caret)
  int col = 0;   // 1-based
};

// Maps positions inside one embedded DSL text (0-based line and column of the text itself) to
// positions in the file. A literal block scalar (`score: |`) starts on `first_line` with every
// line indented by `indent`; a one-line scalar starts at (first_line, first_col).
struct TextOrigin {
  int first_line = 1;  // file line of the text's line 0
  int first_col = 1;   // file column of the text's column 0 on its first line
  int indent = 0;      // for block scalars: file column - 1 of column 0 on every line after the first
  bool block = false;  // block scalar: every line (including the first) is shifted by `indent`
  FilePos map(int line0, int col0) const {
    if (block) return {first_line + line0, indent + col0 + 1};
    if (line0 == 0) return {first_line, first_col + col0};
    return {first_line + line0, col0 + 1};
  }
};

struct Diagnostic {
  FilePos pos;
  std::string message;
};

class Diagnostics {
 public:
  // `file_text` is the whole file, used to print the offending line under each message.
  Diagnostics(std::string file_name, std::string file_text);
  void error(FilePos pos, const std::string& message);
  bool empty() const { return errors_.empty(); }
  size_t count() const { return errors_.size(); }
  const std::vector<Diagnostic>& errors() const { return errors_; }
  const std::string& file_name() const { return file_name_; }
  // "file:line:col: error: message\n<source line>\n<caret>\n" for each error, in file order.
  std::string format() const;

 private:
  std::string file_name_;
  std::vector<std::string> lines_;
  std::vector<Diagnostic> errors_;
};

}  // namespace kvevict::dsl
