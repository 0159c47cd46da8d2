#include "dsl/lexer.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace kvevict::dsl {

const char* token_name(Tok kind) {
  switch (kind) {
    case Tok::Number: return "number";
    case Tok::String: return "string";
    case Tok::Ident: return "name";
    case Tok::Plus: return "'+'";
    case Tok::Minus: return "'-'";
    case Tok::Star: return "'*'";
    case Tok::Slash: return "'/'";
    case Tok::Caret: return "'^'";
    case Tok::Lt: return "'<'";
    case Tok::Le: return "'<='";
    case Tok::Gt: return "'>'";
    case Tok::Ge: return "'>='";
    case Tok::EqEq: return "'=='";
    case Tok::NotEq: return "'!='";
    case Tok::Assign: return "'='";
    case Tok::LParen: return "'('";
    case Tok::RParen: return "')'";
    case Tok::LBracket: return "'['";
    case Tok::RBracket: return "']'";
    case Tok::Comma: return "','";
    case Tok::Colon: return "':'";
    case Tok::DotDot: return "'..'";
    case Tok::Newline: return "end of line";
    case Tok::End: return "end of program";
  }
  return "token";
}

std::vector<Token> lex(const std::string& text, const TextOrigin& origin, Diagnostics& diag) {
  std::vector<Token> out;
  int line = 0, col = 0, depth = 0;
  size_t i = 0;
  auto push = [&](Tok k, std::string s, int l, int c, double v = 0) { out.push_back({k, std::move(s), v, l, c}); };
  while (i < text.size()) {
    char c = text[i];
    int start_col = col;
    if (c == '\n') {
      // Inside brackets a newline continues the expression, but only onto an indented line: a
      // line starting at column 0 always begins a new definition, so an unclosed '(' cannot
      // swallow the rest of the program (and error recovery resumes there).
      if (depth > 0) {
        size_t j = i + 1;
        while (true) {
          size_t k = j;
          while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r')) ++k;
          if (k < text.size() && text[k] == '\n') { j = k + 1; continue; }
          if (k < text.size() && text[k] == '#') { while (k < text.size() && text[k] != '\n') ++k; j = k + 1; if (k >= text.size()) break; continue; }
          if (k == j && k < text.size()) depth = 0;
          break;
        }
      }
      if (depth == 0 && !out.empty() && out.back().kind != Tok::Newline) push(Tok::Newline, "\n", line, col);
      ++i, ++line, col = 0;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') { ++i, ++col; continue; }
    if (c == '#') {
      while (i < text.size() && text[i] != '\n') ++i, ++col;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i + 1])))) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      // "1..3" is a range, not the number "1." followed by ".3".
      if (j < text.size() && text[j] == '.' && !(j + 1 < text.size() && text[j + 1] == '.')) {
        ++j;
        while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      }
      if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
        size_t k = j + 1;
        if (k < text.size() && (text[k] == '+' || text[k] == '-')) ++k;
        if (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) {
          while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) ++k;
          j = k;
        } else {
          diag.error(origin.map(line, col + static_cast<int>(j - i)), "malformed exponent in number");
          j = k;
        }
      }
      std::string s = text.substr(i, j - i);
      double v = std::strtod(s.c_str(), nullptr);
      if (!std::isfinite(v)) diag.error(origin.map(line, col), "number '" + s + "' is out of range");
      if (j < text.size() && (std::isalpha(static_cast<unsigned char>(text[j])) || text[j] == '_'))
        diag.error(origin.map(line, col + static_cast<int>(j - i)), "unexpected letter after number '" + s + "'");
      push(Tok::Number, s, line, col, std::isfinite(v) ? v : 0.0);
      col += static_cast<int>(j - i);
      i = j;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < text.size() && (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_')) ++j;
      push(Tok::Ident, text.substr(i, j - i), line, col);
      col += static_cast<int>(j - i);
      i = j;
      continue;
    }
    if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != c && text[j] != '\n') ++j;
      if (j >= text.size() || text[j] != c) {
        diag.error(origin.map(line, col), "unterminated string");
        col += static_cast<int>(j - i);
        i = j;
        continue;
      }
      push(Tok::String, text.substr(i + 1, j - i - 1), line, col);
      col += static_cast<int>(j + 1 - i);
      i = j + 1;
      continue;
    }
    auto two = [&](char second) { return i + 1 < text.size() && text[i + 1] == second; };
    Tok k;
    int len = 1;
    switch (c) {
      case '+': k = Tok::Plus; break;
      case '-': k = Tok::Minus; break;
      case '*': k = Tok::Star; break;
      case '/': k = Tok::Slash; break;
      case '^': k = Tok::Caret; break;
      case '<': k = two('=') ? (len = 2, Tok::Le) : Tok::Lt; break;
      case '>': k = two('=') ? (len = 2, Tok::Ge) : Tok::Gt; break;
      case '=': k = two('=') ? (len = 2, Tok::EqEq) : Tok::Assign; break;
      case '!':
        if (!two('=')) {
          diag.error(origin.map(line, col), "unexpected character '!' (use 'not' or '!=')");
          ++i, ++col;
          continue;
        }
        k = Tok::NotEq, len = 2;
        break;
      case '(': k = Tok::LParen, ++depth; break;
      case ')': k = Tok::RParen, depth = depth > 0 ? depth - 1 : 0; break;
      case '[': k = Tok::LBracket, ++depth; break;
      case ']': k = Tok::RBracket, depth = depth > 0 ? depth - 1 : 0; break;
      case ',': k = Tok::Comma; break;
      case ':': k = Tok::Colon; break;
      case ';': k = Tok::Newline; break;
      case '.':
        if (two('.')) { k = Tok::DotDot, len = 2; break; }
        [[fallthrough]];
      default: {
        std::string shown = (static_cast<unsigned char>(c) >= 32 && static_cast<unsigned char>(c) < 127)
                                ? std::string(1, c) : "\\x" + std::string(1, "0123456789abcdef"[(c >> 4) & 15]) +
                                                          std::string(1, "0123456789abcdef"[c & 15]);
        diag.error(origin.map(line, col), "unexpected character '" + shown + "'");
        ++i, ++col;
        // One error per UTF-8 character, not per byte.
        while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) ++i;
        continue;
      }
    }
    push(k, text.substr(i, len), line, start_col);
    i += len, col += len;
  }
  if (!out.empty() && out.back().kind != Tok::Newline) push(Tok::Newline, "\n", line, col);
  push(Tok::End, "", line, col);
  return out;
}

}  // namespace kvevict::dsl
