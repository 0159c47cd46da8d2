#pragma once
// UTF-8 decoding and the Unicode classes the BPE pre-tokenizers need (\p{L}, \p{N}, \s).
//
// classify_code_point follows the Unicode general categories (L* letters, N* numbers) and the
// White_Space property, from a range table generated with scripts/gen-unicode-ranges.py
// (unicode_ranges.inc; Unicode 14.0). Marks, punctuation, symbols, controls, emoji are Other.
// Unassigned code points take the class of the assigned run before them.
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvevict {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

CharClass classify_code_point(uint32_t cp);

// One decoded code point and the bytes it came from. Invalid UTF-8 decodes byte by byte as
// U+FFFD (class Other) with length 1, so every input byte belongs to exactly one unit.
struct Utf8Unit {
  uint32_t cp;
  uint32_t offset;  // byte offset in the text
  uint8_t length;   // 1..4
};

std::vector<Utf8Unit> decode_utf8(std::string_view text);

// Appends the UTF-8 encoding of `cp` (< 0x110000) to `out`.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kvevict
