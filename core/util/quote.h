#pragma once
// Quoting file content in error messages. A message names what is wrong with a file; it must not
// copy the file into the terminal: a 50 MB token, key or JSON value in a hostile file would make a
// 50 MB message. Every message that quotes text read from a file (tokens, keys, tensor names, JSON
// dumps) goes through quote_input.
#include <cstddef>
#include <string>
#include <string_view>

namespace kvevict {

// At most the first `max_bytes` bytes of `text` (never splitting a UTF-8 sequence), followed by
// "... (N bytes)" when it was shortened; text that fits is returned unchanged.
inline std::string quote_input(std::string_view text, size_t max_bytes = 80) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // continuation byte
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace kvevict
