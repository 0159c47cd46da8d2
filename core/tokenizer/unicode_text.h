#pragma once
// UTF-8 decoding and a compact Unicode classification for the BPE pre-tokenizers.
//
// Classification is pragmatic, not the full Unicode database: ASCII is exact; outside ASCII a code
// point is whitespace, a number or "other" (punctuation, symbols, marks, emoji, controls, private
// use) when it lies in one of the ranges listed in unicode_text.cpp, and a letter otherwise. Real
// letters of every script therefore classify correctly; rare punctuation or numerals outside the
// tables would be treated as letters (which only changes where a pre-token boundary falls).
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
