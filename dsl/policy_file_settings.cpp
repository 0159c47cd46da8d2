// A policy file's settings (FileCompiler, policy_file_compiler.h): the setting expressions and
// the helpers built on them, the observe, protect, run and merge sections (select is
// policy_file_select.cpp), and the checks that read several sections.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/engine/query_checks.h"
#include "core/engine/replay_pass.h"
#include "dsl/parser.h"
#include "dsl/policy_file_compiler.h"
#include "dsl/policy_keys.h"

namespace kvevict::dsl::policy_file_detail {

LoweredProgram FileCompiler::setting(const YAML::Node& n, bool want_bool, bool allow_prompt_len, bool decode_budget_inputs) {
  if (!n.IsScalar()) {
    diag_.error(pos_of(n), "expected a value or an expression over parameters");
    return {};
  }
  TextOrigin o;
  if (!origin_of(n, o)) return {};
  auto e = parse_expression(n.Scalar(), o, diag_);
  if (!e) return {};
  CheckOptions opt = opts_;
  opt.allow_prompt_len = allow_prompt_len;
  opt.allow_decode_budget_inputs = decode_budget_inputs;
  size_t before = diag_.count();
  LoweredProgram p = check_setting(*e, opt, want_bool, diag_);
  if (diag_.count() != before) return {};
  return p;
}

bool FileCompiler::constant_setting(const YAML::Node& parent, const char* key, bool want_bool, double& out) {
  if (!parent.IsMap()) return false;
  YAML::Node n = parent[key];
  if (!n) return false;
  LoweredProgram p = setting(n, want_bool, false);
  if (p.output < 0) return false;
  out = evaluate_setting(p, 0);
  return true;
}

// A mapping section of the file, its keys checked against policy_section_keys().
YAML::Node FileCompiler::section(const YAML::Node& root, const char* key) {
  YAML::Node n = root[key];
  if (!n || n.IsNull()) return YAML::Node();
  if (!n.IsMap()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a mapping"); return YAML::Node(); }
  check_keys(n, policy_section_keys().at(key), std::string("'") + key + "' section");
  return n;
}

// A prompt-length-dependent integer setting: window, protect.first, protect.recent.
void FileCompiler::int_setting(const YAML::Node& parent, const char* key, LoweredProgram& program, int& value) {
  if (!parent.IsMap() || !parent[key]) { program = LoweredProgram{}; return; }
  program = setting(parent[key], false, true);
  if (program.output < 0) return;
  if (program.nodes[program.output].op != NodeOp::Const) {
    out_.desc.depends_on_prompt_len = true;
    const double at_zero = evaluate_setting(program, 0);  // may be inf or NaN (e.g. 1 / prompt_len)
    value = at_zero > 0 ? static_cast<int>(std::min(at_zero, 1e9)) : 0;
    return;
  }
  double v = program.nodes[program.output].value;
  if (!(v >= 0 && v <= 1e7)) diag_.error(pos_of(parent[key]), std::string("'") + key + "' must be between 0 and 10^7, got " + fmt(v));
  else value = static_cast<int>(v);
}

// A length setting (select.chunk, select.rescue, observe.segment). Production:
//   length_setting = KEY ":" EXPR ;  EXPR over parameters, a whole number in 1 .. 10^7
void FileCompiler::length_setting(const YAML::Node& parent, const char* key, int& out) {
  double v;
  if (!constant_setting(parent, key, false, v)) return;
  if (!(v >= 1 && v <= 1e7) || v != std::floor(v))
    diag_.error(pos_of(parent[key]), std::string("'") + key + "' must be a whole number between 1 and 10^7, got " + fmt(v));
  else out = static_cast<int>(v);
}

// The combinations the engine cannot run (core/engine/segment_checks.h, merge_checks.h,
// query_checks.h, selection_checks.h), each at its key (or its section when the key is absent).
void FileCompiler::report_setting_errors(const YAML::Node& root, const std::vector<SettingError>& errors) {
  for (const SettingError& e : errors) {
    const YAML::Node section_node = root[e.section];
    FilePos at = section_node.IsDefined() ? pos_of(section_node) : pos_of(root);
    // An absent section is an invalid node (IsMap would throw): the error is then at the file's start.
    if (!e.key.empty() && section_node.IsDefined() && section_node.IsMap() && section_node[e.key])
      at = pos_of(section_node[e.key]);
    diag_.error(at, e.message);
  }
}

// The setting sections, in the order of their messages: observe, protect, run, select, merge,
// then the settings one phase makes meaningless (phase_checks).
void FileCompiler::settings(const YAML::Node& root) {
  observe_settings(section(root, "observe"));
  YAML::Node protect = section(root, "protect");
  protect_settings(protect);
  YAML::Node run = section(root, "run");
  run_settings(run);
  YAML::Node select = section(root, "select");
  select_settings(root, select);
  merge_settings(section(root, "merge"));
  phase_checks(run, protect);
}

// observe: the window attention's window and mask, the segment length, the query statistics and
// the replay.
void FileCompiler::observe_settings(const YAML::Node& observe) {
  PolicyDescription& d = out_.desc;
  int_setting(observe, "window", out_.window, d.window);
  d.window_depends_on_prompt_len = out_.window.output >= 0 && out_.window.nodes[out_.window.output].op != NodeOp::Const;
  double v;
  if (constant_setting(observe, "causal", true, v)) d.observe.causal = v != 0;
  if (constant_setting(observe, "same_index_head", true, v)) d.observe.same_index_head = v != 0;
  length_setting(observe, "segment", d.observe.segment);
  if (constant_setting(observe, "scaled", true, v)) d.observe.scaled = v != 0;
  query_observe_settings(observe);
  replay_settings(observe);
}

// The prompt query statistics' keys and FinchPress's window (core/engine/query_signals.h):
//   observe.query_stats_from: EXPR    whole number >= 0 over parameters (first prompt position)
//   observe.query_rotation: none | future_mean   (a mode)
//   observe.rope_future: EXPR         whole number 1 .. 10^6 (positions averaged by future_mean)
//   observe.window_after_token: EXPR  whole number 0 .. 10^9 (a token id); observe.window is then the
//                                     window of a prompt without the token (0: a usage error)
void FileCompiler::query_observe_settings(const YAML::Node& observe) {
  if (!observe.IsMap()) return;
  PolicyObserve& o = out_.desc.observe;
  double v;
  if (constant_setting(observe, "query_stats_from", false, v)) {
    if (!(v >= 0 && v <= 1e7) || v != std::floor(v))
      diag_.error(pos_of(observe["query_stats_from"]), "'query_stats_from' must be a whole number between 0 and 10^7, got " + fmt(v));
    else o.query_stats_from = static_cast<int>(v);
  }
  o.query_rotation = choice(observe, "query_rotation", o.query_rotation);
  if (constant_setting(observe, "rope_future", false, v)) {
    if (!(v >= 1 && v <= 1e6) || v != std::floor(v))
      diag_.error(pos_of(observe["rope_future"]), "'rope_future' must be a whole number between 1 and 10^6, got " + fmt(v));
    else o.rope_future = static_cast<int>(v);
  }
  if (constant_setting(observe, "window_after_token", false, v)) {
    if (!(v >= 0 && v <= 1e9) || v != std::floor(v))
      diag_.error(pos_of(observe["window_after_token"]), "'window_after_token' must be a token id (a whole number >= 0), got " + fmt(v));
    else o.window_after_token = static_cast<int>(v);
  }
}

// KVzip's context replay (core/engine/replay_pass.h, A_replay). Production:
//   observe.replay: "{" [chunk: EXPR] [previous_tail: EXPR] [n_sink: EXPR] [normalise: BOOL] "}"
//   whole numbers over parameters: chunk 1 .. kMaxReplayChunk, previous_tail 0 .. min(chunk, 1024)
//   (the replay prompt is bounded: kMaxReplayPromptTokens), n_sink 0 .. 10^7; {} takes kvpress's defaults
void FileCompiler::replay_settings(const YAML::Node& observe) {
  if (!observe.IsMap() || !observe["replay"]) return;
  const YAML::Node r = observe["replay"];
  if (!r.IsMap()) {
    diag_.error(pos_of(r), "'replay' must be a mapping {chunk:, previous_tail:, n_sink:, normalise:} ({} for kvpress's defaults)");
    return;
  }
  check_keys(r, policy_replay_keys(), "'observe.replay' mapping");
  PolicyObserve::Replay& o = out_.desc.observe.replay;
  o.enabled = true;
  auto whole = [&](const char* key, double lo, double hi, int& out) {
    double v;
    if (!constant_setting(r, key, false, v)) return;
    if (!(v >= lo && v <= hi) || v != std::floor(v))
      diag_.error(pos_of(r[key]), std::string("'") + key + "' must be a whole number between " + fmt(lo) + " and " +
                                      fmt(hi) + ", got " + fmt(v));
    else out = static_cast<int>(v);
  };
  whole("chunk", 1, kMaxReplayChunk, o.chunk);
  whole("previous_tail", 0, 1024, o.previous_tail);
  whole("n_sink", 0, 1e7, o.n_sink);
  double v;
  if (constant_setting(r, "normalise", true, v)) o.normalise = v != 0;
  if (o.previous_tail > o.chunk)
    diag_.error(pos_of(r["previous_tail"] ? r["previous_tail"] : r),
                "'previous_tail' (" + std::to_string(o.previous_tail) + ") must not exceed 'chunk' (" +
                    std::to_string(o.chunk) + "): it quotes the end of the previous chunk");
}

// protect: the tokens no selection evicts, at the prompt and (decode_*) while decoding.
void FileCompiler::protect_settings(YAML::Node& protect) {
  PolicyDescription& d = out_.desc;
  int_setting(protect, "first", out_.protect_first, d.protect.first);
  int_setting(protect, "recent", out_.protect_recent, d.protect.recent);
  if (protect.IsMap() && protect["decode_first"]) int_setting(protect, "decode_first", out_.protect_decode_first, d.protect.decode_first);
  if (protect.IsMap() && protect["decode_recent"]) int_setting(protect, "decode_recent", out_.protect_decode_recent, d.protect.decode_recent);
}

// run: when the policy runs (prefill, cascading, decode trigger and budget, prefill blocks).
void FileCompiler::run_settings(YAML::Node& run) {
  if (!run.IsMap()) return;
  PolicyDescription& d = out_.desc;
  double v;
  if (constant_setting(run, "prefill", true, v)) d.run.at_prefill = v != 0;
  if (constant_setting(run, "cascading", true, v)) d.run.cascading = v != 0;
  if (constant_setting(run, "skip_margin_includes_window", true, v)) d.run.skip_margin_includes_window = v != 0;
  if (constant_setting(run, "reassign_positions", true, v)) d.run.reassign_positions = v != 0;
  if (constant_setting(run, "decode_every", false, v)) {
    if (v < 0 || v > 1e6 || v != std::floor(v)) diag_.error(pos_of(run["decode_every"]), "'decode_every' must be a whole number >= 0");
    else d.run.decode_every = static_cast<int>(v);
  }
  if (run["decode_budget"]) {
    // decode_budget: EXPR over params, prompt_len, decode_step and budget (tokens per head).
    out_.decode_budget = setting(run["decode_budget"], false, true, true);
    d.run.has_decode_budget = out_.decode_budget.output >= 0;
  }
  if (constant_setting(run, "prefill_block", false, v)) {
    if (v < 0 || v > 1e7 || v != std::floor(v)) diag_.error(pos_of(run["prefill_block"]), "'prefill_block' must be a whole number >= 0 (0: the prompt in one block)");
    else d.run.prefill_block = static_cast<int>(v);
  }
  if (constant_setting(run, "decode_slack", false, v)) {
    if (v < 0 || v > 1e7 || v != std::floor(v)) diag_.error(pos_of(run["decode_slack"]), "'decode_slack' must be a whole number >= 0");
    else d.run.decode_slack = static_cast<int>(v);
  }
}

// Settings of one phase that the other settings make meaningless: a decode budget or decode-phase
// protection without a decode trigger (they would be ignored), and a prefill in blocks without a
// prefill run, with a cascade or with unfolded GQA (the engine runs neither; engine_checks.cpp
// repeats this for hand-built descriptions). Each is an error at its key.
void FileCompiler::phase_checks(const YAML::Node& run, const YAML::Node& protect) {
  const PolicyDescription& d = out_.desc;
  if (d.run.decode_every == 0) {
    if (run.IsMap() && run["decode_budget"])
      diag_.error(pos_of(run["decode_budget"]), "'decode_budget' is read only while decoding; set 'decode_every: N' too");
    for (const char* k : {"decode_first", "decode_recent"})
      if (protect.IsMap() && protect[k])
        diag_.error(pos_of(protect[k]), std::string("'") + k + "' is read only while decoding; set run.decode_every too");
  }
  if (d.run.prefill_block > 0 && (!d.run.at_prefill || d.run.cascading || d.select.unfold_gqa))
    diag_.error(pos_of(run["prefill_block"]), "'prefill_block' needs run.prefill true and cannot be combined with "
                                              "cascading or select.unfold_gqa");
}

// merge_section := "merge:" "{" [enabled: bool] [method: codebook | nearest | pivot | weighted | cam | d2o]
//                  ( codebook keys: theta_key, theta_value, scope, first_layer, last_layer
//                  | nearest / pivot / weighted keys: similarity_threshold
//                  | cam keys: merge_budget
//                  | d2o keys: ema_alpha, ema_beta ) "}"
// merge_budget = "merge_budget" ":" EXPR ;  EXPR over parameters, a whole number in 1 .. 10^6
// ema_alpha | ema_beta = KEY ":" EXPR ;     EXPR over parameters, in 0 .. 1
// A key another method reads is an error at that key (it would be silently ignored).
void FileCompiler::merge_settings(const YAML::Node& merge) {
  if (!merge.IsMap()) return;
  PolicyDescription& d = out_.desc;
  double v;
  d.merge.enabled = true;
  if (constant_setting(merge, "enabled", true, v)) d.merge.enabled = v != 0;
  d.merge.method = choice(merge, "method", d.merge.method);
  const bool codebook = d.merge.method == MergeMethod::Codebook;
  const std::string method(mode_name(d.merge.method));
  if (!codebook && d.merge.enabled && d.select.unfold_gqa)  // unfold evicts outside the per-head merge
    diag_.error(pos_of(merge["method"]), "merge.method " + method + " cannot be combined with select.unfold_gqa");
  for (const char* k : {"theta_key", "theta_value", "scope", "first_layer", "last_layer"})
    if (!codebook && merge[k])
      diag_.error(pos_of(merge[k]), std::string("'") + k + "' is a codebook setting; merge.method " + method +
                                        " does not read it");
  const bool cam = d.merge.method == MergeMethod::Cam, d2o = d.merge.method == MergeMethod::D2o;
  if ((codebook || cam || d2o) && merge["similarity_threshold"])
    diag_.error(pos_of(merge["similarity_threshold"]),
                codebook ? "'similarity_threshold' is a merge-on-evict setting; merge.method codebook does not read it"
                         : "'similarity_threshold' is a nearest / pivot / weighted setting; merge.method " + method +
                               " does not read it");
  for (const char* k : {"ema_alpha", "ema_beta"}) {
    if (!d2o && merge[k])
      diag_.error(pos_of(merge[k]), std::string("'") + k + "' is a merge.method d2o setting; merge.method " + method + " does not read it");
    if (d2o && constant_setting(merge, k, false, v)) {
      if (!(v >= 0 && v <= 1)) diag_.error(pos_of(merge[k]), std::string("'") + k + "' must be in 0..1, got " + fmt(v));
      else (k[4] == 'a' ? d.merge.ema_alpha : d.merge.ema_beta) = v;
    }
  }
  if (!cam && merge["merge_budget"])
    diag_.error(pos_of(merge["merge_budget"]), "'merge_budget' is a merge.method cam setting; merge.method " + method + " does not read it");
  if (cam && constant_setting(merge, "merge_budget", false, v)) {
    if (!(v >= 1 && v <= 1e6) || v != std::floor(v))
      diag_.error(pos_of(merge["merge_budget"]), "'merge_budget' must be a whole number between 1 and 10^6, got " + fmt(v));
    else d.merge.merge_budget = static_cast<int>(v);
  }
  if (!codebook && !cam && !d2o && constant_setting(merge, "similarity_threshold", false, v)) {
    if (!(v >= -1 && v <= 1)) diag_.error(pos_of(merge["similarity_threshold"]), "'similarity_threshold' is a cosine similarity threshold in -1..1");
    else d.merge.similarity_threshold = v;
  }
  if (!codebook) return;
  for (const char* k : {"theta_key", "theta_value"})
    if (constant_setting(merge, k, false, v)) {
      if (!(v >= -1 && v <= 1)) diag_.error(pos_of(merge[k]), std::string("'") + k + "' is a cosine similarity threshold in -1..1");
      else (k[6] == 'k' ? d.merge.theta_key : d.merge.theta_value) = v;
    }
  d.merge.scope = choice(merge, "scope", d.merge.scope);
  for (const char* k : {"first_layer", "last_layer"})
    if (constant_setting(merge, k, false, v)) {
      const bool first = k[0] == 'f';
      if (v != std::floor(v) || v < (first ? 0 : -1) || v > 1e6)
        diag_.error(pos_of(merge[k]), std::string("'") + k + "' must be a whole number >= " + (first ? "0" : "-1"));
      else (first ? d.merge.first_layer : d.merge.last_layer) = static_cast<int>(v);
    }
}

// Keys of the query statistics that no program reads (they would be ignored), at the key.
void FileCompiler::query_key_checks(const YAML::Node& root) {
  const YAML::Node observe = root["observe"];
  if (!observe.IsDefined() || !observe.IsMap() || reads_query_statistics(out_.desc)) return;
  for (const char* k : {"query_stats_from", "query_rotation", "rope_future"})
    if (observe[k] && !(std::string(k) == "rope_future" && out_.desc.needs(kvevict::TensorSignal::RopeFuture)))
      diag_.error(pos_of(observe[k]), std::string("'") + k + "' is read only by Q_mean and Q_cov" +
                                          (std::string(k) == "rope_future" ? " (and R_future)" : "") + "; no program reads them");
}

}  // namespace kvevict::dsl::policy_file_detail
