#pragma once
// Shared helpers of the DSL unit tests: one program text checked as the policy loader checks a
// program block (parse, check, lower), and the usage error a whole policy text gets. `file` is the
// name the diagnostics print, so each suite keeps its own in its golden messages.
#include <string>
#include <utility>
#include <vector>

#include "core/util/error.h"
#include "dsl/checker.h"
#include "dsl/parser.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl::test {

struct Checked {
  LoweredProgram program;
  std::string errors;  // the formatted diagnostics; "" when the program is valid
};

inline Checked check_program_text(const std::string& file, const std::string& text,
                                  ProgramContext context = ProgramContext::Score, std::vector<ParamBinding> params = {}) {
  Diagnostics diag(file, text);
  TextOrigin origin;
  origin.block = true;
  Program p = parse_program(text, origin, diag);
  CheckOptions opt;
  opt.context = context;
  opt.params = std::move(params);
  opt.had_syntax_errors = !diag.empty();
  LoweredProgram lowered = check_program(p, opt, {1, 1}, diag);
  return {lowered, diag.format()};
}

// The UsageError message of compiling a policy text as `file`; "" when it compiles.
inline std::string policy_usage_error(const std::string& file, const std::string& text) {
  try {
    compile_policy_text(file, text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace kvevict::dsl::test
