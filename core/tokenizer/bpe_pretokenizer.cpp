#include "core/tokenizer/bpe_pretokenizer.h"

#include "core/tokenizer/unicode_text.h"

namespace kvevict {
namespace {

// A window [begin, end) of decoded units; positions outside it read as "no character", which is
// how the regexes see the end of a chunk.
class Scanner {
 public:
  Scanner(const std::vector<Utf8Unit>& units, size_t begin, size_t end) : u_(units), begin_(begin), end_(end) {}

  bool at_end(size_t i) const { return i >= end_; }
  uint32_t cp(size_t i) const { return i < end_ ? u_[i].cp : 0; }
  bool is(size_t i, CharClass c) const { return i < end_ && classify_code_point(u_[i].cp) == c; }
  bool letter(size_t i) const { return is(i, CharClass::Letter); }
  bool number(size_t i) const { return is(i, CharClass::Number); }
  bool space(size_t i) const { return is(i, CharClass::Space); }
  bool other(size_t i) const { return is(i, CharClass::Other); }
  bool newline(size_t i) const { return i < end_ && (u_[i].cp == '\r' || u_[i].cp == '\n'); }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  const std::vector<Utf8Unit>& u_;
  size_t begin_, end_;
};

uint32_t lower_ascii(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d (case-insensitive for Llama3/Qwen2): length of the match at i, or 0.
size_t contraction(const Scanner& s, size_t i, bool ignore_case) {
  if (s.cp(i) != '\'') return 0;
  auto c = [&](size_t k) { return ignore_case ? lower_ascii(s.cp(k)) : s.cp(k); };
  const uint32_t a = c(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = c(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The whitespace alternatives shared by both regex families, given a run of whitespace [i, j):
// \s+(?!\S) takes the whole run at the end of the chunk, otherwise all but its last character
// (which then prefixes the next word); a single whitespace character falls to \s+.
size_t whitespace_run(const Scanner& s, size_t i) {
  size_t j = i;
  while (s.space(j)) ++j;
  if (s.at_end(j)) return j - i;
  return j - i > 1 ? j - i - 1 : 1;
}

// Gpt2 regex, one match at i (always >= 1 unit).
size_t gpt2_match(const Scanner& s, size_t i) {
  if (size_t n = contraction(s, i, false)) return n;
  const bool lead_space = s.cp(i) == ' ';
  const size_t k = lead_space ? i + 1 : i;
  auto run = [&](auto pred) {
    size_t j = k;
    while (pred(j)) ++j;
    return j - i;
  };
  if (s.letter(k)) return run([&](size_t j) { return s.letter(j); });
  if (s.number(k)) return run([&](size_t j) { return s.number(j); });
  if (s.other(k)) return run([&](size_t j) { return s.other(j); });
  if (s.space(i)) return whitespace_run(s, i);
  return 1;  // unreachable: every unit is one of the four classes
}

// Llama3 / Qwen2 regex, one match at i.
size_t llama3_match(const Scanner& s, size_t i, size_t max_digits) {
  if (size_t n = contraction(s, i, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t k = i;
  if (!s.letter(i) && !s.number(i) && !s.newline(i) && s.letter(i + 1)) k = i + 1;
  if (s.letter(k)) {
    while (s.letter(k)) ++k;
    return k - i;
  }
  // \p{N}{1,max}
  if (s.number(i)) {
    size_t j = i;
    while (s.number(j) && j - i < max_digits) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  k = s.cp(i) == ' ' ? i + 1 : i;
  if (s.other(k)) {
    while (s.other(k)) ++k;
    while (s.newline(k)) ++k;
    return k - i;
  }
  if (s.space(i)) {
    // \s*[\r\n]+ : ends right after the last newline of the whitespace run.
    size_t j = i, last_newline = 0;
    bool has_newline = false;
    while (s.space(j)) {
      if (s.newline(j)) {
        has_newline = true;
        last_newline = j;
      }
      ++j;
    }
    if (has_newline) return last_newline + 1 - i;
    return whitespace_run(s, i);
  }
  return 1;
}

void split_window(const std::vector<Utf8Unit>& units, size_t begin, size_t end, std::string_view text,
                  BpePreTokenizer pre, std::vector<std::string_view>& out) {
  Scanner s(units, begin, end);
  size_t i = begin;
  while (i < end) {
    size_t n = 1;
    switch (pre) {
      case BpePreTokenizer::Gpt2:
      case BpePreTokenizer::SmolLM: n = gpt2_match(s, i); break;
      case BpePreTokenizer::Llama3: n = llama3_match(s, i, 3); break;
      case BpePreTokenizer::Qwen2: n = llama3_match(s, i, 1); break;
    }
    const size_t first_byte = units[i].offset;
    const size_t last = i + n - 1;
    const size_t end_byte = units[last].offset + units[last].length;
    out.push_back(text.substr(first_byte, end_byte - first_byte));
    i += n;
  }
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text, BpePreTokenizer pre) {
  std::vector<std::string_view> out;
  const std::vector<Utf8Unit> units = decode_utf8(text);
  if (pre != BpePreTokenizer::SmolLM) {
    split_window(units, 0, units.size(), text, pre, out);
    return out;
  }
  // SmolLM: each \p{N} is a chunk of its own; the stretches between them go through Gpt2 separately.
  size_t start = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    if (classify_code_point(units[i].cp) != CharClass::Number) continue;
    split_window(units, start, i, text, BpePreTokenizer::Gpt2, out);
    out.push_back(text.substr(units[i].offset, units[i].length));
    start = i + 1;
  }
  split_window(units, start, units.size(), text, BpePreTokenizer::Gpt2, out);
  return out;
}

}  // namespace kvevict
