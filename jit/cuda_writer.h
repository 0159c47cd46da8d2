#pragma once
// Builds CUDA source text for the code generator, keeping track of where each line came from.
// Lines written with a policy location are preceded by `#line N "file"` whenever the location
// changes, so NVRTC's messages cite the policy file; lines without one return to the generated
// file's own numbering (`#line <generated line> "<program name>"`), so errors in the scaffolding
// cite the generated source instead of a wrong policy line.
#include <string>

namespace kvevict::jit {

struct SourceLocation {
  std::string file;  // empty: generated scaffolding
  int line = 0;
};

class CudaWriter {
 public:
  explicit CudaWriter(std::string program_name) : program_name_(std::move(program_name)) {}

  // One line of scaffolding (indentation is added; `text` must not contain a newline).
  void line(const std::string& text);
  // One line that implements something at `where` in the policy.
  void line(const std::string& text, const SourceLocation& where);
  // Verbatim block (e.g. the prelude); counts its lines, no #line mapping inside.
  void block(const std::string& text);

  void indent() { ++depth_; }
  void dedent() { if (depth_ > 0) --depth_; }

  const std::string& text() const { return text_; }
  const std::string& program_name() const { return program_name_; }

  // A string literal for CUDA source ("..." with \ and " escaped, control characters as \ooo).
  static std::string quote(const std::string& text);

 private:
  void emit(const std::string& raw);

  std::string program_name_;
  std::string text_;
  int depth_ = 0;
  int lines_ = 0;           // lines in text_ so far
  bool mapped_ = false;     // true while the last line was attributed to a policy location
};

}  // namespace kvevict::jit
