#pragma once
// Type and shape checker for DSL programs; a program that checks is lowered at the same time
// (dsl/lowered.h). Every error is reported to the diagnostics; checking continues after an error
// (an erroneous sub-expression gets the type Error, which silences follow-on messages).
#include <string>
#include <vector>

#include "dsl/ast.h"
#include "dsl/diagnostics.h"
#include "dsl/lowered.h"

namespace kvevict::dsl {

// A policy parameter as the checker sees it: its resolved value is a compile-time constant.
struct ParamBinding {
  std::string name;
  Type type = Type::Number;          // Number (int, float, fraction), Bool, or Enum
  double value = 0;                  // Enum: index into options
  std::vector<std::string> options;  // Enum only
};

enum class ProgramContext {
  Score,        // per (layer, KV head): axes h, q, t; output `score[t]`
  LayerWeight,  // per layer: axes g, h, q, t; scalar `budget` available; output `layer_weight`
  Setting,      // a single scalar expression over parameters (and prompt_len where allowed)
  HeadWeight,   // per (layer, KV head) like Score; output the scalar `head_weight` (share of the layer's budget)
  HeadMode,     // per (layer, KV head) like Score; output the scalar `head_mode`; the names
                // compressed (0), full (1) and streaming (2) are its values (core/engine/head_budgets.h)
  ChannelScore, // per (layer, KV head) like Score; output `channel_score[d]`, one score per key
                // channel (core/engine/channel_selection.h)
};

struct CheckOptions {
  ProgramContext context = ProgramContext::Score;
  bool allow_prompt_len = true;  // Setting context only
  // Setting context only: also decode_step and budget (run.decode_budget, a per-step budget).
  bool allow_decode_budget_inputs = false;
  std::vector<ParamBinding> params;
  bool had_syntax_errors = false;  // do not also report a missing output the parser lost
  TableList tables;                // the policy's tables (`tables:`), read as NAME[layer, kv_head, d]
};

// Checks and lowers a program; the returned program is valid only if no error was reported.
LoweredProgram check_program(const Program& program, const CheckOptions& options, FilePos program_pos, Diagnostics& diag);

// Checks and lowers one Setting expression (scalar). `want_bool`: the value must be a boolean.
LoweredProgram check_setting(const Expr& expr, const CheckOptions& options, bool want_bool, Diagnostics& diag);

}  // namespace kvevict::dsl
