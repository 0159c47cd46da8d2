#pragma once
// Tokens of the scoring language. Newlines end statements except inside brackets; `#` starts a
// comment that runs to the end of the line. Positions are 0-based (line, column) in the DSL text;
// TextOrigin turns them into file positions.
#include <string>
#include <vector>

#include "dsl/diagnostics.h"

namespace kvevict::dsl {

enum class Tok {
  Number, String, Ident,
  Plus, Minus, Star, Slash, Caret,
  Lt, Le, Gt, Ge, EqEq, NotEq, Assign,
  LParen, RParen, LBracket, RBracket, Comma, Colon, DotDot,
  Newline, End,
};

struct Token {
  Tok kind = Tok::End;
  std::string text;   // identifier name, string contents, or the operator as written
  double number = 0;  // for Number
  int line = 0, col = 0;
};

const char* token_name(Tok kind);

// Splits `text` into tokens; every lexical error (stray character, bad number, unterminated
// string) is reported to `diag` and lexing continues after it. The result always ends with End.
std::vector<Token> lex(const std::string& text, const TextOrigin& origin, Diagnostics& diag);

}  // namespace kvevict::dsl
