#include "core/tokenizer/unicode_text.h"

#include <algorithm>
#include <iterator>
#include <string>

namespace kvevict {
namespace {

struct Range {
  uint32_t first, last;
  CharClass cls;
};

// Every code point not covered by a range is a letter.
constexpr Range kNonLetters[] = {
#include "core/tokenizer/unicode_ranges.inc"
};

constexpr bool sorted_and_disjoint() {
  for (size_t i = 0; i < std::size(kNonLetters); ++i) {
    if (kNonLetters[i].first > kNonLetters[i].last) return false;
    if (i > 0 && kNonLetters[i].first <= kNonLetters[i - 1].last) return false;
  }
  return true;
}
static_assert(sorted_and_disjoint(), "unicode_ranges.inc must be sorted and disjoint (binary search)");

}  // namespace

CharClass classify_code_point(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::Letter;
    if (cp >= '0' && cp <= '9') return CharClass::Number;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::Space;
    return CharClass::Other;
  }
  auto it = std::upper_bound(std::begin(kNonLetters), std::end(kNonLetters), cp,
                             [](uint32_t v, const Range& r) { return v < r.first; });
  if (it != std::begin(kNonLetters) && cp <= std::prev(it)->last) return std::prev(it)->cls;
  return CharClass::Letter;
}

std::vector<Utf8Unit> decode_utf8(std::string_view text) {
  std::vector<Utf8Unit> units;
  units.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
    uint32_t cp = 0xFFFD;
    uint8_t len = 1;
    int need = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (need == 0) {
      cp = c;
    } else if (need > 0 && i + static_cast<size_t>(need) < n) {
      uint32_t v = c & (0x3F >> need);
      bool ok = true;
      for (int k = 1; ok && k <= need; ++k) {
        if ((s[i + k] & 0xC0) != 0x80) ok = false;
        else v = (v << 6) | (s[i + k] & 0x3F);
      }
      // Reject overlong forms, surrogates and values past U+10FFFF.
      static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
      if (ok && v >= kMin[need] && v <= 0x10FFFF && !(v >= 0xD800 && v <= 0xDFFF)) {
        cp = v;
        len = static_cast<uint8_t>(need + 1);
      }
    }
    units.push_back({cp, static_cast<uint32_t>(i), len});
    i += len;
  }
  return units;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kvevict
