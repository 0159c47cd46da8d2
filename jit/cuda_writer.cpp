// CudaWriter; see cuda_writer.h.
#include "jit/cuda_writer.h"

#include <cstdio>

namespace kvevict::jit {

void CudaWriter::emit(const std::string& raw) {
  text_ += raw;
  text_ += '\n';
  ++lines_;
}

void CudaWriter::line(const std::string& text) {
  if (mapped_) {
    // The directive names the number of the line that follows it.
    emit("#line " + std::to_string(lines_ + 2) + " " + quote(program_name_));
    mapped_ = false;
  }
  emit(std::string(size_t(depth_) * 2, ' ') + text);
}

void CudaWriter::line(const std::string& text, const SourceLocation& where) {
  if (where.file.empty() || where.line <= 0) {
    line(text);
    return;
  }
  // One directive per mapped line: consecutive lines from the same policy line would otherwise
  // be numbered line, line + 1, ...
  emit("#line " + std::to_string(where.line) + " " + quote(where.file));
  mapped_ = true;
  emit(std::string(size_t(depth_) * 2, ' ') + text);
}

void CudaWriter::block(const std::string& text) {
  if (mapped_) line("");
  for (char c : text)
    if (c == '\n') ++lines_;
  text_ += text;
  if (!text.empty() && text.back() != '\n') {
    text_ += '\n';
    ++lines_;
  }
}

std::string CudaWriter::quote(const std::string& text) {
  std::string quoted = "\"";
  for (unsigned char c : text) {
    if (c == '\\' || c == '"') {
      quoted += '\\';
      quoted += char(c);
    } else if (c < 0x20 || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\%03o", c);
      quoted += escaped;
    } else {
      quoted += char(c);
    }
  }
  return quoted + "\"";
}

}  // namespace kvevict::jit
