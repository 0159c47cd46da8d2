#pragma once
// Recursive-descent parser for the scoring language (grammar: docs/DSL.md). Syntax errors are
// reported to the diagnostics and the parser resynchronises at the next statement, so one run
// reports every broken statement.
#include <memory>
#include <string>

#include "dsl/ast.h"
#include "dsl/diagnostics.h"

namespace kvevict::dsl {

// A program: definitions, one per line (or separated by ';').
Program parse_program(const std::string& text, const TextOrigin& origin, Diagnostics& diag);

// One expression (the value of a YAML field such as `protect: {recent: window}`); null on error.
std::unique_ptr<Expr> parse_expression(const std::string& text, const TextOrigin& origin, Diagnostics& diag);

}  // namespace kvevict::dsl
