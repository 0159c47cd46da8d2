#pragma once
// A policy file: YAML with DSL programs inside. compile_policy_file reads, validates (strictly:
// unknown keys, missing required keys, parameters outside their declared range are errors),
// type-checks and lowers everything, and collects every error of the file before throwing one
// UsageError that lists them all (file:line:col: error: message + source line + caret).
//
// Keys (docs/DSL.md has the full reference):
//   name, about                                   required strings
//   params:  NAME: {int|float|bool|fraction: DEFAULT, min:, max:, doc:} | {enum: [A, B], default: A, doc:}
//   observe: {window: EXPR, causal: BOOL, same_index_head: BOOL}   window attention A[h, q, t]
//            replay: {chunk: EXPR, previous_tail: EXPR, n_sink: EXPR, normalise: BOOL}   KVzip's A_replay
//   protect: {first: EXPR, recent: EXPR, decode_first: EXPR, decode_recent: EXPR}
//                                                 EXPR over params and prompt_len
//   run:     {prefill: BOOL, cascading: BOOL, decode_every: EXPR, decode_slack: EXPR,
//             skip_margin_includes_window: BOOL, reassign_positions: BOOL,
//             decode_budget: EXPR over params, prompt_len, decode_step and budget,
//             prefill_block: EXPR (tokens per prefill block; 0: one block)}
//   score: PROGRAM (required)   decode_score: PROGRAM   layer_weight: PROGRAM
//   head_mode: PROGRAM   head_weight: PROGRAM   (per KV head; core/engine/head_budgets.h)
//   channel_score: PROGRAM (channel_score[d] per KV head)   channels: {prune: EXPR}
//                                                 (key-channel pruning; core/engine/channel_selection.h)
//   tables:  NAME: {file: PATH, axes: [layer, kv_head, d], shape: [N, ...]}   (dsl/policy_tables.h)
//   select:  {random_share:, temperature:, scope: kv_head|layer|layer_shared|model, floor_alpha:, kept_order: positional|score,
//             unfold_gqa: BOOL, threshold: EXPR, score_at: eviction|insertion, stages: [{score: NAME, keep: EXPR}, ...],
//             layer_allocation: share|tokens|mass, mass: EXPR, ...}
//   scores:  NAME: PROGRAM per extra score program of select.stages
//   merge:   {enabled: BOOL, theta_key:, theta_value:, scope: per_head|per_layer_across_heads,
//             first_layer: EXPR, last_layer: EXPR}
#include <map>
#include <string>
#include <vector>

#include "core/engine/policy_program.h"
#include "dsl/checker.h"
#include "dsl/lowered.h"

namespace kvevict::dsl {

struct ParamDecl {
  std::string name;
  std::string type;  // int | float | bool | enum | fraction
  double default_value = 0;
  std::vector<std::string> options;  // enum
  bool has_min = false, has_max = false;
  double min = 0, max = 0;
  std::string doc;
  std::string range_text() const;
  std::string value_text(double v) const;
};

struct CompiledPolicy {
  PolicyDescription desc;
  std::vector<ParamDecl> params;
  std::vector<ParamBinding> bindings;  // resolved values (defaults + overrides)
  LoweredProgram score, decode_score, layer_weight;
  LoweredProgram head_mode, head_weight;  // output < 0 when the file has none
  LoweredProgram channel_score;           // channel_score[d] (core/engine/channel_selection.h); output < 0: none
  TableList tables;                       // `tables:` (dsl/policy_tables.h)
  // Settings that may depend on prompt_len (scalar programs; constant ones are a single Const).
  LoweredProgram window, protect_first, protect_recent, protect_decode_first, protect_decode_recent;
  LoweredProgram decode_budget;  // run.decode_budget (empty: none)
  // `scores:` programs in file order; select.stages' program i > 0 is stage_scores[i - 1].
  std::vector<LoweredProgram> stage_scores;
};

// Throws UsageError listing every error of the file.
CompiledPolicy compile_policy_file(const std::string& path, const std::map<std::string, std::string>& overrides = {});

// Same, from text (tests, fuzzing); `path` names the file in messages.
CompiledPolicy compile_policy_text(const std::string& path, const std::string& text,
                                   const std::map<std::string, std::string>& overrides = {});

// Evaluates a scalar setting program for a prompt length.
double evaluate_setting(const LoweredProgram& program, int prompt_len);
// Evaluates run.decode_budget (a setting that may also read decode_step and budget).
double evaluate_decode_budget(const LoweredProgram& program, int prompt_len, int decode_step, double budget);

}  // namespace kvevict::dsl
