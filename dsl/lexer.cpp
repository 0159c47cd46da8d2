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

namespace {

bool digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// One pass over the text. Each method reads one production of the lexical grammar at i_ (whose
// first character the caller has checked), pushes its token or reports its error, and leaves i_
// and col_ after it. depth_ counts the brackets open, inside which newlines continue the line.
class Lexer {
 public:
  Lexer(const std::string& text, const TextOrigin& origin, Diagnostics& diag)
      : text_(text), origin_(origin), diag_(diag) {}

  // program = { token | blank | comment | newline } ;
  std::vector<Token> run() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c == '\n') {
        newline();
      } else if (blank(c)) {
        ++i_, ++col_;
      } else if (c == '#') {
        comment();
      } else if (digit(c) || (c == '.' && digit(at(i_ + 1)))) {
        number();
      } else if (name_start(c)) {
        name();
      } else if (c == '"' || c == '\'') {
        string(c);
      } else {
        punctuation(c);
      }
    }
    if (!out_.empty() && out_.back().kind != Tok::Newline) push(Tok::Newline, "\n", col_);
    push(Tok::End, "", col_);
    return std::move(out_);
  }

 private:
  char at(size_t j) const { return j < text_.size() ? text_[j] : '\0'; }
  void push(Tok k, std::string s, int col, double v = 0) { out_.push_back({k, std::move(s), v, line_, col}); }
  void error(int col, const std::string& message) { diag_.error(origin_.map(line_, col), message); }
  void advance(size_t j) {  // to j on the same line
    col_ += static_cast<int>(j - i_);
    i_ = j;
  }

  // newline = "\n" ;  one Newline token per run of lines, none inside brackets. Inside brackets a
  // newline continues the expression, but only onto an indented line: a line starting at column 0
  // always begins a new definition, so an unclosed '(' cannot swallow the rest of the program (and
  // error recovery resumes there). Blank and comment-only lines in between do not count.
  void newline() {
    if (depth_ > 0 && next_content_at_column_zero()) depth_ = 0;
    if (depth_ == 0 && !out_.empty() && out_.back().kind != Tok::Newline) push(Tok::Newline, "\n", col_);
    ++i_, ++line_, col_ = 0;
  }
  bool next_content_at_column_zero() const {
    size_t j = i_ + 1;
    while (true) {
      size_t k = j;
      while (k < text_.size() && blank(text_[k])) ++k;
      if (k < text_.size() && text_[k] == '\n') {
        j = k + 1;
      } else if (k < text_.size() && text_[k] == '#') {
        while (k < text_.size() && text_[k] != '\n') ++k;
        if (k >= text_.size()) return false;
        j = k + 1;
      } else {
        return k == j && k < text_.size();
      }
    }
  }

  // comment = "#" { any character but "\n" } ;
  void comment() {
    size_t j = i_;
    while (j < text_.size() && text_[j] != '\n') ++j;
    advance(j);
  }

  // number = digits [ "." digits ] [ ( "e" | "E" ) [ "+" | "-" ] digits ] | "." digits ... ;
  // "1..3" is a range, not the number "1." followed by ".3". A letter right after a number, a bad
  // exponent and a value beyond double's range are errors; the token is kept (value 0 if not finite).
  void number() {
    size_t j = i_;
    while (digit(at(j))) ++j;
    if (at(j) == '.' && at(j + 1) != '.') {
      ++j;
      while (digit(at(j))) ++j;
    }
    if (at(j) == 'e' || at(j) == 'E') {
      size_t k = j + 1;
      if (at(k) == '+' || at(k) == '-') ++k;
      if (digit(at(k))) {
        while (digit(at(k))) ++k;
      } else {
        error(col_ + static_cast<int>(j - i_), "malformed exponent in number");
      }
      j = k;
    }
    std::string s = text_.substr(i_, j - i_);
    const double v = std::strtod(s.c_str(), nullptr);
    if (!std::isfinite(v)) error(col_, "number '" + s + "' is out of range");
    if (name_start(at(j))) error(col_ + static_cast<int>(j - i_), "unexpected letter after number '" + s + "'");
    push(Tok::Number, std::move(s), col_, std::isfinite(v) ? v : 0.0);
    advance(j);
  }

  // name = ( letter | "_" ) { letter | digit | "_" } ;
  void name() {
    size_t j = i_;
    while (name_char(at(j))) ++j;
    push(Tok::Ident, text_.substr(i_, j - i_), col_);
    advance(j);
  }

  // string = '"' { any character but '"' and "\n" } '"' | "'" { ... } "'" ;  unterminated on its
  // line: an error, and lexing resumes at the end of the line.
  void string(char quote) {
    size_t j = i_ + 1;
    while (j < text_.size() && text_[j] != quote && text_[j] != '\n') ++j;
    if (j >= text_.size() || text_[j] != quote) {
      error(col_, "unterminated string");
      advance(j);
      return;
    }
    push(Tok::String, text_.substr(i_ + 1, j - i_ - 1), col_);
    advance(j + 1);
  }

  // punctuation = "+" | "-" | "*" | "/" | "^" | "<" | "<=" | ">" | ">=" | "==" | "!=" | "=" | "(" | ")"
  //             | "[" | "]" | "," | ":" | ".." | ";" ;   (";" ends a statement as a newline does)
  // Anything else is an error, reported once per UTF-8 character.
  void punctuation(char c) {
    const bool then_eq = at(i_ + 1) == '=';
    Tok k;
    size_t len = 1;
    switch (c) {
      case '+': k = Tok::Plus; break;
      case '-': k = Tok::Minus; break;
      case '*': k = Tok::Star; break;
      case '/': k = Tok::Slash; break;
      case '^': k = Tok::Caret; break;
      case '<': k = then_eq ? (len = 2, Tok::Le) : Tok::Lt; break;
      case '>': k = then_eq ? (len = 2, Tok::Ge) : Tok::Gt; break;
      case '=': k = then_eq ? (len = 2, Tok::EqEq) : Tok::Assign; break;
      case '!':
        if (!then_eq) {
          error(col_, "unexpected character '!' (use 'not' or '!=')");
          advance(i_ + 1);
          return;
        }
        k = Tok::NotEq, len = 2;
        break;
      case '(': k = Tok::LParen, ++depth_; break;
      case ')': k = Tok::RParen, depth_ = depth_ > 0 ? depth_ - 1 : 0; break;
      case '[': k = Tok::LBracket, ++depth_; break;
      case ']': k = Tok::RBracket, depth_ = depth_ > 0 ? depth_ - 1 : 0; break;
      case ',': k = Tok::Comma; break;
      case ':': k = Tok::Colon; break;
      case ';': k = Tok::Newline; break;
      case '.':
        if (at(i_ + 1) == '.') {
          k = Tok::DotDot, len = 2;
          break;
        }
        [[fallthrough]];
      default:
        unexpected(c);
        return;
    }
    push(k, text_.substr(i_, len), col_);
    advance(i_ + len);
  }
  void unexpected(char c) {
    const auto byte = static_cast<unsigned char>(c);
    static const char* const hex = "0123456789abcdef";
    const std::string shown =
        byte >= 32 && byte < 127 ? std::string(1, c) : std::string("\\x") + hex[(byte >> 4) & 15] + hex[byte & 15];
    error(col_, "unexpected character '" + shown + "'");
    ++i_, ++col_;
    while (i_ < text_.size() && (static_cast<unsigned char>(text_[i_]) & 0xC0) == 0x80) ++i_;
  }

  const std::string& text_;
  const TextOrigin& origin_;
  Diagnostics& diag_;
  std::vector<Token> out_;
  size_t i_ = 0;
  int line_ = 0, col_ = 0, depth_ = 0;
};

}  // namespace

std::vector<Token> lex(const std::string& text, const TextOrigin& origin, Diagnostics& diag) {
  return Lexer(text, origin, diag).run();
}

}  // namespace kvevict::dsl
