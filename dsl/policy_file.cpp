#include "dsl/policy_file.h"

#include <cmath>
#include <set>
#include <unordered_map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/engine/channel_checks.h"
#include "core/engine/merge_checks.h"
#include "core/engine/query_checks.h"
#include "core/engine/replay_checks.h"
#include "core/engine/replay_pass.h"
#include "core/engine/segment_checks.h"
#include "core/engine/selection_checks.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "dsl/builtin_names.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"
#include "dsl/policy_keys.h"
#include "dsl/policy_tables.h"
#include "dsl/yaml_duplicate_keys.h"

namespace kvevict::dsl {

std::string ParamDecl::value_text(double v) const {
  if (type == "bool") return v != 0 ? "true" : "false";
  if (type == "enum") return v >= 0 && v < options.size() ? options[static_cast<size_t>(v)] : "?";
  if (type == "int") return std::to_string(static_cast<long long>(v));
  std::ostringstream s;
  s << v;
  return s.str();
}

std::string ParamDecl::range_text() const {
  if (type == "enum") {
    std::string s;
    for (const auto& o : options) s += (s.empty() ? "" : "|") + o;
    return s;
  }
  if (has_min && has_max) return value_text(min) + ".." + value_text(max);
  if (has_min) return "min " + value_text(min);
  if (has_max) return "max " + value_text(max);
  return "";
}

double evaluate_setting(const LoweredProgram& program, int prompt_len) {
  EvalInputs in;
  in.heads.resize(1);
  in.scalars[static_cast<int>(ScalarSignal::PromptLen)] = static_cast<float>(prompt_len);
  return evaluate(program, in).at(0);
}

double evaluate_decode_budget(const LoweredProgram& program, int prompt_len, int decode_step, double budget) {
  EvalInputs in;
  in.heads.resize(1);
  in.scalars[static_cast<int>(ScalarSignal::PromptLen)] = static_cast<float>(prompt_len);
  in.scalars[static_cast<int>(ScalarSignal::DecodeStep)] = static_cast<float>(decode_step);
  in.scalars[static_cast<int>(ScalarSignal::Budget)] = static_cast<float>(budget);
  return evaluate(program, in).at(0);
}

namespace {

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Deepest nesting of YAML flow collections ('[', '{' outside quotes and comments); yaml-cpp parses
// them recursively, so a hostile file could otherwise exhaust the stack.
int flow_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  char quote = 0;
  bool comment = false;
  for (char c : text) {
    if (c == '\n') { comment = false; quote = 0; continue; }
    if (comment) continue;
    if (quote) { if (c == quote) quote = 0; continue; }
    if (c == '#') comment = true;
    else if (c == '"' || c == '\'') quote = c;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

class FileCompiler {
 public:
  FileCompiler(const std::string& path, const std::string& text) : path_(path), text_(text), diag_(path, text) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) lines_.push_back(line);
  }

  CompiledPolicy run(const std::map<std::string, std::string>& overrides) {
    if (int depth = flow_depth(text_); depth > 64) {
      diag_.error({1, 1}, "YAML nesting is too deep (" + std::to_string(depth) + " levels of [ or {)");
      throw UsageError(diag_.format());
    }
    YAML::Node root;
    try {
      root = YAML::Load(text_);
    } catch (const YAML::Exception& e) {
      diag_.error({e.mark.line + 1, e.mark.column + 1}, "YAML: " + e.msg);
      throw UsageError(diag_.format());
    }
    reject_duplicate_keys(root, path_);  // yaml-cpp would silently keep the first `score:`
    if (!root.IsMap()) {
      diag_.error(pos_of(root), "a policy file must be a YAML mapping (name:, about:, score:, ...)");
      throw UsageError(diag_.format());
    }
    check_keys(root, policy_top_level_keys(), "policy file");
    for (const char* req : {"name", "about", "score"})
      if (!root[req]) diag_.error({1, 1}, std::string("missing required key '") + req + "'");
    out_.desc.source = path_;
    out_.desc.name = string_field(root, "name");
    out_.desc.about = string_field(root, "about");
    if (root["name"] && !out_.desc.name.empty()) {
      for (char c : out_.desc.name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) {
          diag_.error(pos_of(root["name"]), "a policy name may contain only letters, digits, '_' and '-'");
          break;
        }
    }
    params(root["params"]);
    const int implicit_kept_order = add_implicit_kept_order(root);
    apply_overrides(overrides);
    opts_.params = out_.bindings;
    parse_tables_section(root["tables"], path_, diag_, out_.tables);
    opts_.tables = out_.tables;
    settings(root);
    if (implicit_kept_order >= 0) {
      const ParamBinding& b = out_.bindings[static_cast<size_t>(implicit_kept_order)];
      parse_mode(b.options[static_cast<size_t>(b.value)], out_.desc.select.kept_order);
    }
    const size_t before_programs = diag_.count();
    programs(root);
    if (diag_.count() == before_programs) query_key_checks(root);  // what the programs read is known
    if (diag_.empty()) {
      report_setting_errors(root, segment_setting_errors(out_.desc));
      report_setting_errors(root, merge_setting_errors(out_.desc));     // merge_checks.h
      report_setting_errors(root, query_setting_errors(out_.desc));     // query_checks.h
      report_setting_errors(root, selection_setting_errors(out_.desc));
      report_setting_errors(root, channel_setting_errors(out_.desc));   // channel_checks.h
      report_setting_errors(root, replay_setting_errors(out_.desc));    // replay_checks.h
    }
    if (!diag_.empty()) throw UsageError(diag_.format());
    for (size_t i = 0; i < out_.params.size(); ++i)
      out_.desc.params[out_.params[i].name] = out_.params[i].value_text(out_.bindings[i].value);
    return std::move(out_);
  }

 private:
  FilePos pos_of(const YAML::Node& n) const {
    YAML::Mark m = n.Mark();
    if (m.line < 0) return {0, 0};
    return {m.line + 1, m.column + 1};
  }

  void check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what) {
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) { diag_.error(pos_of(it->first), "keys of the " + what + " must be plain names"); continue; }
      const std::string k = it->first.Scalar();
      if (!allowed.count(k)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        diag_.error(pos_of(it->first), "unknown key '" + k + "' in the " + what + " (allowed: " + list + ")");
      }
    }
  }

  std::string string_field(const YAML::Node& root, const char* key) {
    YAML::Node n = root[key];
    if (!n) return "";
    if (!n.IsScalar()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a string"); return ""; }
    return n.Scalar();
  }

  // params: NAME: {TYPE: DEFAULT, min:, max:, doc:} | {enum: [..], default:, doc:}
  void params(const YAML::Node& node) {
    if (!node || node.IsNull()) return;
    if (!node.IsMap()) { diag_.error(pos_of(node), "'params' must be a mapping of parameter declarations"); return; }
    for (auto it = node.begin(); it != node.end(); ++it) {
      ParamDecl d;
      d.name = it->first.Scalar();
      const YAML::Node spec = it->second;
      FilePos at = pos_of(it->first);
      if (!valid_name(d.name)) { diag_.error(at, "invalid parameter name '" + d.name + "'"); continue; }
      if (reserved_name(d.name)) { diag_.error(at, "parameter '" + d.name + "' would hide a built-in name"); continue; }
      if (!spec.IsMap()) { diag_.error(pos_of(spec), "parameter '" + d.name + "' must be a mapping like {float: 1.0, min: 0}"); continue; }
      check_keys(spec, policy_parameter_keys(), "declaration of parameter '" + d.name + "'");
      int types = 0;
      YAML::Node def;
      for (const char* t : {"int", "float", "bool", "fraction", "enum"})
        if (spec[t]) { ++types; d.type = t; def = spec[t]; }
      if (types != 1) {
        diag_.error(at, "parameter '" + d.name + "' needs exactly one type key: int, float, bool, fraction or enum");
        d.type = "float";
        register_param(d, at);
        continue;
      }
      if (spec["doc"]) d.doc = spec["doc"].Scalar();
      if (d.type == "enum") {
        if (!def.IsSequence() || def.size() == 0) { diag_.error(pos_of(def), "enum options must be a non-empty list, e.g. [avg, max]"); d.options = {"?"}; register_param(d, at); continue; }
        for (const auto& o : def) d.options.push_back(o.IsScalar() ? o.Scalar() : "?");
        if (!spec["default"]) { diag_.error(at, "enum parameter '" + d.name + "' needs a default"); register_param(d, at); continue; }
        parse_value(d, spec["default"].Scalar(), d.default_value, pos_of(spec["default"]), "default");
      } else {
        if (spec["default"]) diag_.error(pos_of(spec["default"]), "the default of '" + d.name + "' is the value of its type key ({" + d.type + ": VALUE})");
        if (d.type == "fraction") d.has_min = d.has_max = true, d.min = 0, d.max = 1;
        for (const char* bound : {"min", "max"}) {
          if (!spec[bound]) continue;
          if (d.type == "bool") { diag_.error(pos_of(spec[bound]), "a bool parameter has no range"); continue; }
          double v;
          ParamDecl numeric = d;
          numeric.type = d.type == "int" ? "int" : "float";
          numeric.has_min = numeric.has_max = false;
          if (!parse_value(numeric, spec[bound].Scalar(), v, pos_of(spec[bound]), bound)) continue;
          // A fraction's declared range narrows [0, 1]; any other type takes the bound as written
          // (negative minimums included: SpindleKV's cosine thresholds go down to -1).
          if (bound[1] == 'i') d.has_min = true, d.min = d.type == "fraction" ? std::max(d.min, v) : v;
          else d.has_max = true, d.max = d.type == "fraction" ? std::min(d.max, v) : v;
        }
        if (d.has_min && d.has_max && d.min > d.max) { diag_.error(at, "parameter '" + d.name + "': min is larger than max"); register_param(d, at); continue; }
        parse_value(d, def.Scalar(), d.default_value, pos_of(def), "default");
      }
      if (param_index_.count(d.name)) diag_.error(at, "parameter '" + d.name + "' is declared twice");
      // A parameter with a bad declaration is still registered (the file fails anyway), so its
      // uses are not reported again as unknown names.
      register_param(d, at);
    }
  }

  // kept_order is an engine mechanism every policy has (spec §8 "kept_order (all policies)"), so
  // it is a parameter of every file without a declaration in each: unless the file declares its
  // own `kept_order` parameter or points select.kept_order at another enum parameter, an enum
  // parameter kept_order [positional, score] is added whose default is the file's literal
  // select.kept_order (else positional). It is overridable and recorded like any parameter.
  // Returns its binding index, or -1 when the file governs kept_order itself.
  int add_implicit_kept_order(const YAML::Node& root) {
    if (param_index_.count("kept_order")) return -1;
    KeptOrder literal = KeptOrder::Positional;
    const YAML::Node select = root["select"];
    if (select && select.IsMap() && select["kept_order"]) {
      if (!select["kept_order"].IsScalar()) return -1;  // settings() reports it
      if (!parse_mode(select["kept_order"].Scalar(), literal)) return -1;  // another parameter, or an error
    }
    ParamDecl d;
    d.name = "kept_order";
    d.type = "enum";
    for (std::string_view o : ModeNames<KeptOrder>::names) d.options.emplace_back(o);
    d.default_value = static_cast<int>(literal);
    d.doc = "order of the survivors in the cache, every policy (engine): positional (ascending position; "
            "NACL, H2O, TOVA code) or score (top-k rank, sampled, then protected; CAKE code)";
    register_param(d, {0, 0});
    return static_cast<int>(out_.params.size()) - 1;
  }

  // The first declaration of a name wins; the index keeps a file with many parameters linear.
  void register_param(const ParamDecl& d, FilePos at) {
    if (!param_index_.emplace(d.name, out_.params.size()).second) return;
    ParamBinding b;
    b.name = d.name;
    b.type = d.type == "bool" ? Type::Bool : d.type == "enum" ? Type::Enum : Type::Number;
    b.value = d.default_value;
    b.options = d.options;
    out_.params.push_back(d);
    out_.bindings.push_back(b);
    param_pos_.push_back(at);
  }

  static bool valid_name(const std::string& n) {
    if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
    for (char c : n)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
    return true;
  }
  static bool reserved_name(const std::string& n) {
    return is_builtin_name(n) || n == "score" || n == "layer_weight" || n == "head_weight" || n == "head_mode" ||
           n == "channel_score";
  }

  // Parses `text` as a value of d's type and checks d's range. `what` names the value in messages.
  bool parse_value(const ParamDecl& d, const std::string& text, double& out, FilePos at, const std::string& what) {
    auto bad = [&](const std::string& m) {
      diag_.error(at, "parameter '" + d.name + "': " + what + " " + m);
      return false;
    };
    if (d.type == "bool") {
      if (text == "true") out = 1;
      else if (text == "false") out = 0;
      else return bad("'" + text + "' is not a bool (true or false)");
      return true;
    }
    if (d.type == "enum") {
      for (size_t i = 0; i < d.options.size(); ++i)
        if (d.options[i] == text) { out = static_cast<double>(i); return true; }
      return bad("'" + text + "' is not one of " + d.range_text());
    }
    char* end = nullptr;
    errno = 0;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !std::isfinite(v) || errno == ERANGE) return bad("'" + text + "' is not a number");
    if (d.type == "int" && (v != std::floor(v) || std::fabs(v) > 1e9)) return bad("'" + text + "' is not an integer");
    if (d.has_min && v < d.min) return bad(text + " is below the minimum " + d.value_text(d.min));
    if (d.has_max && v > d.max) return bad(text + " is above the maximum " + d.value_text(d.max));
    out = v;
    return true;
  }

  void apply_overrides(const std::map<std::string, std::string>& overrides) {
    for (const auto& [name, value] : overrides) {
      const auto found = param_index_.find(name);
      const size_t i = found == param_index_.end() ? out_.params.size() : found->second;
      if (i == out_.params.size()) {
        std::string list;
        for (const auto& p : out_.params) list += (list.empty() ? "" : ", ") + p.name;
        diag_.error({0, 0}, "unknown parameter '" + name + "' in override (parameters: " + (list.empty() ? "none" : list) + ")");
        continue;
      }
      double v;
      if (parse_value(out_.params[i], value, v, {0, 0}, "override value")) out_.bindings[i].value = v;
    }
  }

  // The origin of a YAML scalar's text in the file, for mapping DSL positions.
  bool origin_of(const YAML::Node& n, TextOrigin& o) {
    YAML::Mark m = n.Mark();
    o.first_line = m.line + 1;
    o.first_col = m.column + 1;
    if (m.line < 0 || m.line >= static_cast<int>(lines_.size())) return true;
    const std::string& l = lines_[m.line];
    char c = m.column < static_cast<int>(l.size()) ? l[m.column] : ' ';
    if (c == '>') {
      diag_.error(pos_of(n), "use a literal block ('|') for programs; a folded block ('>') joins the lines");
      return false;
    }
    if (c == '|') {
      o.block = true;
      o.first_line = m.line + 2;
      o.indent = 0;
      for (size_t i = m.line + 1; i < lines_.size(); ++i) {
        size_t k = lines_[i].find_first_not_of(' ');
        if (k == std::string::npos) continue;
        o.indent = static_cast<int>(k);
        break;
      }
    } else if (c == '"' || c == '\'') {
      o.first_col += 1;
    }
    return true;
  }

  LoweredProgram setting(const YAML::Node& n, bool want_bool, bool allow_prompt_len, bool decode_budget_inputs = false) {
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

  bool constant_setting(const YAML::Node& parent, const char* key, bool want_bool, double& out) {
    if (!parent.IsMap()) return false;
    YAML::Node n = parent[key];
    if (!n) return false;
    LoweredProgram p = setting(n, want_bool, false);
    if (p.output < 0) return false;
    out = evaluate_setting(p, 0);
    return true;
  }

  // A mapping section of the file, its keys checked against policy_section_keys().
  YAML::Node section(const YAML::Node& root, const char* key) {
    YAML::Node n = root[key];
    if (!n || n.IsNull()) return YAML::Node();
    if (!n.IsMap()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a mapping"); return YAML::Node(); }
    check_keys(n, policy_section_keys().at(key), std::string("'") + key + "' section");
    return n;
  }

  // A prompt-length-dependent integer setting: window, protect.first, protect.recent.
  void int_setting(const YAML::Node& parent, const char* key, LoweredProgram& program, int& value) {
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
  void length_setting(const YAML::Node& parent, const char* key, int& out) {
    double v;
    if (!constant_setting(parent, key, false, v)) return;
    if (!(v >= 1 && v <= 1e7) || v != std::floor(v))
      diag_.error(pos_of(parent[key]), std::string("'") + key + "' must be a whole number between 1 and 10^7, got " + fmt(v));
    else out = static_cast<int>(v);
  }

  // The combinations the engine cannot run (core/engine/segment_checks.h, merge_checks.h,
  // query_checks.h, selection_checks.h), each at its key (or its section when the key is absent).
  void report_setting_errors(const YAML::Node& root, const std::vector<SettingError>& errors) {
    for (const SettingError& e : errors) {
      const YAML::Node section_node = root[e.section];
      FilePos at = section_node.IsDefined() ? pos_of(section_node) : pos_of(root);
      // An absent section is an invalid node (IsMap would throw): the error is then at the file's start.
      if (!e.key.empty() && section_node.IsDefined() && section_node.IsMap() && section_node[e.key])
        at = pos_of(section_node[e.key]);
      diag_.error(at, e.message);
    }
  }

  // The prompt query statistics' keys and FinchPress's window (core/engine/query_signals.h):
  //   observe.query_stats_from: EXPR    whole number >= 0 over parameters (first prompt position)
  //   observe.query_rotation: none | future_mean   (a mode)
  //   observe.rope_future: EXPR         whole number 1 .. 10^6 (positions averaged by future_mean)
  //   observe.window_after_token: EXPR  whole number 0 .. 10^9 (a token id); observe.window is then the
  //                                     window of a prompt without the token (0: a usage error)
  void query_observe_settings(const YAML::Node& observe) {
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
  void replay_settings(const YAML::Node& observe) {
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

  // Keys of the query statistics that no program reads (they would be ignored), at the key.
  void query_key_checks(const YAML::Node& root) {
    const YAML::Node observe = root["observe"];
    if (!observe.IsDefined() || !observe.IsMap() || reads_query_statistics(out_.desc)) return;
    for (const char* k : {"query_stats_from", "query_rotation", "rope_future"})
      if (observe[k] && !(std::string(k) == "rope_future" && out_.desc.needs(kvevict::TensorSignal::RopeFuture)))
        diag_.error(pos_of(observe[k]), std::string("'") + k + "' is read only by Q_mean and Q_cov" +
                                            (std::string(k) == "rope_future" ? " (and R_future)" : "") + "; no program reads them");
  }

  // A mode key (core/engine/policy_modes.h): one of the mode's spellings, or the name of an enum
  // parameter whose value is one of them.
  template <class Mode>
  Mode choice(const YAML::Node& parent, const char* key, Mode fallback) {
    if (!parent.IsMap() || !parent[key]) return fallback;
    YAML::Node n = parent[key];
    std::string v = n.IsScalar() ? n.Scalar() : "";
    for (const auto& b : out_.bindings)  // the name of an enum parameter selects its value
      if (b.name == v && b.type == Type::Enum) v = b.options[static_cast<size_t>(b.value)];
    Mode mode = fallback;
    if (!parse_mode(v, mode)) {
      std::string list;
      for (std::string_view o : ModeNames<Mode>::names) list += (list.empty() ? "" : ", ") + std::string(o);
      diag_.error(pos_of(n), std::string("'") + key + "' must be one of " + list + " (or an enum parameter with those options)");
      return fallback;
    }
    return mode;
  }

  void settings(const YAML::Node& root) {
    PolicyDescription& d = out_.desc;
    YAML::Node observe = section(root, "observe");
    int_setting(observe, "window", out_.window, d.window);
    d.window_depends_on_prompt_len = out_.window.output >= 0 && out_.window.nodes[out_.window.output].op != NodeOp::Const;
    double v;
    if (constant_setting(observe, "causal", true, v)) d.observe.causal = v != 0;
    if (constant_setting(observe, "same_index_head", true, v)) d.observe.same_index_head = v != 0;
    length_setting(observe, "segment", d.observe.segment);
    if (constant_setting(observe, "scaled", true, v)) d.observe.scaled = v != 0;
    query_observe_settings(observe);
    replay_settings(observe);
    YAML::Node protect = section(root, "protect");
    int_setting(protect, "first", out_.protect_first, d.protect.first);
    int_setting(protect, "recent", out_.protect_recent, d.protect.recent);
    if (protect.IsMap() && protect["decode_first"]) int_setting(protect, "decode_first", out_.protect_decode_first, d.protect.decode_first);
    if (protect.IsMap() && protect["decode_recent"]) int_setting(protect, "decode_recent", out_.protect_decode_recent, d.protect.decode_recent);
    YAML::Node run = section(root, "run");
    if (run.IsMap()) {
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
    YAML::Node select =
        section(root, "select");
    if (select.IsMap()) {
      if (constant_setting(select, "random_share", false, v)) {
        if (!(v >= 0 && v <= 1)) diag_.error(pos_of(select["random_share"]), "'random_share' must be in 0..1, got " + fmt(v));
        else d.select.random_share = v;
      }
      if (constant_setting(select, "temperature", false, v)) {
        if (!(v > 0 && v < 1e30)) diag_.error(pos_of(select["temperature"]), "'temperature' must be positive, got " + fmt(v));
        else d.select.temperature = v;
      }
      if (constant_setting(select, "floor_alpha", false, v)) {
        if (!(v >= 0 && v <= 1)) diag_.error(pos_of(select["floor_alpha"]), "'floor_alpha' must be in 0..1, got " + fmt(v));
        else d.select.floor_alpha = v;
      }
      d.select.scope = choice(select, "scope", d.select.scope);
      d.select.kept_order = choice(select, "kept_order", d.select.kept_order);
      d.select.layer_allocation = choice(select, "layer_allocation", d.select.layer_allocation);
      d.select.head_allocation = choice(select, "head_allocation", d.select.head_allocation);
      if (d.select.head_allocation == HeadAllocation::Tokens && !root["head_weight"])
        diag_.error(pos_of(select["head_allocation"]), "'head_allocation: tokens' reads each head's count from a head_weight program; the file has none");
      if (d.select.layer_allocation == LayerAllocation::Tokens && !root["layer_weight"])
        diag_.error(pos_of(select["layer_allocation"]), "'layer_allocation: tokens' reads each layer's budget from a layer_weight program; the file has none");
      if (d.select.layer_allocation == LayerAllocation::Tokens && d.run.cascading)
        diag_.error(pos_of(select["layer_allocation"]), "'layer_allocation: tokens' cannot be combined with run.cascading (a cascade re-splits one total)");
      if (constant_setting(select, "unfold_gqa", true, v)) d.select.unfold_gqa = v != 0;
      d.select.unit = choice(select, "unit", d.select.unit);
      d.select.chunk_score = choice(select, "chunk_score", d.select.chunk_score);
      d.select.quota = choice(select, "quota", d.select.quota);
      length_setting(select, "chunk", d.select.chunk);
      d.select.gate = choice(select, "gate", d.select.gate);
      length_setting(select, "rescue", d.select.rescue);
      selection_rule_settings(root, select);
    }
    merge_settings(section(root, "merge"));
    phase_checks(run, protect);
  }

  // The selection rules beyond top-k (core/engine/selection_checks.h lists their combinations):
  //   threshold_setting = "threshold:" EXPR ;    EXPR over parameters, a finite number
  //   score_at_setting  = "score_at:" ( "eviction" | "insertion" | ENUM_PARAM ) ;
  //   mass_setting      = "mass:" EXPR ;         EXPR over parameters, 0 < value <= 1
  //   stages_setting    = "stages:" "[" stage { "," stage } "]" ;   at most kMaxStages
  //   stage             = "{" "score:" NAME [ "," ( "keep:" | "share:" ) EXPR ] "}" ;   NAME: score or a key of scores:
  void selection_rule_settings(const YAML::Node& root, const YAML::Node& select) {
    PolicySelect& s = out_.desc.select;
    double v;
    if (constant_setting(select, "threshold", false, v)) {
      if (!std::isfinite(v)) diag_.error(pos_of(select["threshold"]), "'threshold' must be a finite number, got " + fmt(v));
      else s.has_threshold = true, s.threshold = v;
    }
    s.score_at = choice(select, "score_at", s.score_at);
    if (constant_setting(select, "mass", false, v)) {
      if (!(v > 0 && v <= 1)) diag_.error(pos_of(select["mass"]), "'mass' is a share of the attention mass in (0, 1], got " + fmt(v));
      else s.mass = v;
    }
    stages_setting(root, select["stages"]);
  }

  static constexpr size_t kMaxStages = 8;

  void stages_setting(const YAML::Node& root, const YAML::Node& stages) {
    if (!stages) return;
    if (!stages.IsSequence() || stages.size() == 0 || stages.size() > kMaxStages) {
      diag_.error(pos_of(stages), "'stages' must be a list of 1 to " + std::to_string(kMaxStages) +
                                      " stages like {score: NAME, keep: EXPR}");
      return;
    }
    const YAML::Node scores = root["scores"];
    double v;
    for (const YAML::Node& st : stages) {
      if (!st.IsMap()) { diag_.error(pos_of(st), "a stage must be a mapping {score: NAME, keep: EXPR}"); continue; }
      check_keys(st, policy_stage_keys(), "stage");
      PolicySelect::Stage stage;
      const YAML::Node name = st["score"];
      if (!name || !name.IsScalar()) { diag_.error(pos_of(st), "a stage needs 'score: NAME' (score or a key of 'scores:')"); continue; }
      stage.program = name.Scalar() == "score" ? 0 : -1;
      if (stage.program < 0 && scores && scores.IsMap()) {
        int i = 1;
        for (auto it = scores.begin(); it != scores.end(); ++it, ++i)
          if (it->first.IsScalar() && it->first.Scalar() == name.Scalar()) stage.program = i;
      }
      if (stage.program < 0) {
        diag_.error(pos_of(name), "stage score '" + name.Scalar() + "' is neither 'score' nor a key of 'scores:'");
        continue;
      }
      if (constant_setting(st, "keep", false, v)) {
        if (!(v > 0 && v <= 1)) diag_.error(pos_of(st["keep"]), "a stage's 'keep' is the share of its input it keeps, in (0, 1], got " + fmt(v));
        else stage.keep = v;
      }
      if (constant_setting(st, "share", false, v)) {
        if (!(v > 0 && v <= 1)) diag_.error(pos_of(st["share"]), "a stage's 'share' is its part of the free budget, in (0, 1], got " + fmt(v));
        else stage.share = v;
      }
      out_.desc.select.stages.push_back(stage);
    }
    share_stage_checks(stages);
  }

  // Stages either keep a share of their input (keep, sequential) or take a share of one budget
  // (share, every stage but the last, which takes the rest); the shares add up to at most 1.
  void share_stage_checks(const YAML::Node& stages) {
    const auto& list = out_.desc.select.stages;
    if (list.size() != stages.size()) return;  // a stage was already refused
    bool any_share = false, any_keep = false;
    double sum = 0;
    for (const auto& st : list) any_share |= st.share > 0, any_keep |= st.keep > 0, sum += st.share;
    if (!any_share) return;
    if (any_keep) diag_.error(pos_of(stages), "stages take either 'keep' (each of its input) or 'share' (of one budget), not both");
    for (size_t i = 0; i + 1 < list.size(); ++i)
      if (!(list[i].share > 0)) diag_.error(pos_of(stages[i]), "with shares, every stage but the last needs 'share: EXPR'");
    if (list.back().share > 0 && list.size() > 1)
      diag_.error(pos_of(stages[list.size() - 1]["share"]), "the last stage takes the rest of the budget; it has no 'share'");
    if (list.size() == 1) diag_.error(pos_of(stages), "'share' splits one budget between stages; a single stage has nothing to share");
    if (sum > 1 + 1e-6) diag_.error(pos_of(stages), "the stages' shares add up to " + fmt(sum) + ", more than the whole budget");
  }

  // Settings of one phase that the other settings make meaningless: a decode budget or decode-phase
  // protection without a decode trigger (they would be ignored), and a prefill in blocks without a
  // prefill run, with a cascade or with unfolded GQA (the engine runs neither; engine_checks.cpp
  // repeats this for hand-built descriptions). Each is an error at its key.
  void phase_checks(const YAML::Node& run, const YAML::Node& protect) {
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
  void merge_settings(const YAML::Node& merge) {
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

  LoweredProgram program(const YAML::Node& root, const char* key, ProgramContext ctx) {
    return program_node(root[key], key, ctx);
  }

  LoweredProgram program_node(const YAML::Node& n, const char* key, ProgramContext ctx) {
    if (!n) return {};
    if (!n.IsScalar()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a program (a literal block: " + key + ": |)"); return {}; }
    TextOrigin o;
    if (!origin_of(n, o)) return {};
    size_t before = diag_.count();
    Program ast = parse_program(n.Scalar(), o, diag_);
    CheckOptions opt = opts_;
    opt.had_syntax_errors = diag_.count() != before;
    opt.context = ctx;
    return check_program(ast, opt, pos_of(n), diag_);
  }

  void programs(const YAML::Node& root) {
    PolicyDescription& d = out_.desc;
    out_.score = program(root, "score", ProgramContext::Score);
    out_.decode_score = program(root, "decode_score", ProgramContext::Score);
    out_.layer_weight = program(root, "layer_weight", ProgramContext::LayerWeight);
    out_.head_mode = program(root, "head_mode", ProgramContext::HeadMode);
    out_.head_weight = program(root, "head_weight", ProgramContext::HeadWeight);
    channel_settings(root);
    d.has_decode_score = root["decode_score"].IsDefined();
    d.has_layer_weight = root["layer_weight"].IsDefined();
    d.has_head_plan = check_head_programs(root);
    stage_score_programs(root);
    std::vector<const LoweredProgram*> all = {&out_.score,     &out_.decode_score, &out_.layer_weight,
                                              &out_.head_mode, &out_.head_weight,  &out_.channel_score};
    for (const LoweredProgram& p : out_.stage_scores) all.push_back(&p);
    for (const LoweredProgram* p : all) {
      for (int s = 0; s < kNumTensorSignals; ++s) d.reads[s] = d.reads[s] || p->uses[s];
    }
    // The engine computes the window attention while decoding only if the decode indicator reads it.
    d.decode_reads = (d.has_decode_score ? out_.decode_score : out_.score).uses;
    d.decode_reads_known = true;
    for (const LoweredProgram* p : all)
      if (p != &out_.decode_score)
        for (int s = 0; s < kNumTensorSignals; ++s) d.prompt_reads[s] = d.prompt_reads[s] || p->uses[s];
    d.prompt_reads_known = true;
    d.run.decode_uses_window_attention = d.decode_reads[static_cast<int>(TensorSignal::WindowAttention)];
    const char* keys[] = {"score", "decode_score", "layer_weight", "head_mode", "head_weight", "channel_score"};
    const LoweredProgram* progs[] = {&out_.score,     &out_.decode_score, &out_.layer_weight,
                                     &out_.head_mode, &out_.head_weight,  &out_.channel_score};
    // Signals made from the window queries (the signal table's source) need an observation window.
    for (int i = 0; i < 6; ++i)
      for (const kvevict::TensorSignalInfo& info : kvevict::kTensorSignalTable)
        if (info.source == kvevict::SignalSource::WindowQueries && progs[i]->uses[kvevict::signal_index(info.id)] &&
            !root["observe"])
          diag_.error(pos_of(root[keys[i]]), std::string("'") + keys[i] + "' reads the " + std::string(info.description) +
                                                 " " + std::string(info.dsl_name) +
                                                 ", but the file has no 'observe: {window: ...}'");
  }

  // Key-channel pruning (core/engine/channel_selection.h; ThinK):
  //   channel_score: PROGRAM           defines channel_score[d], per (layer, KV head)
  //   channels: "{" "prune" ":" EXPR "}"   EXPR over parameters: the fraction of key channels zeroed,
  //                                    in [0, 1) (default 0, kvpress ThinKPress's); needs channel_score
  // The combinations the stage refuses are core/engine/channel_checks.h's (reported in run()).
  void channel_settings(const YAML::Node& root) {
    PolicyDescription& d = out_.desc;
    out_.channel_score = program(root, "channel_score", ProgramContext::ChannelScore);
    d.channels.enabled = root["channel_score"].IsDefined();
    const YAML::Node channels = section(root, "channels");
    if (root["channels"] && !d.channels.enabled)
      diag_.error(pos_of(root["channels"]), "'channels' configures the channel_score stage, but the file has no 'channel_score' program");
    double v;
    if (constant_setting(channels, "prune", false, v)) {
      if (!(v >= 0 && v < 1)) diag_.error(pos_of(channels["prune"]), "'prune' is the fraction of key channels zeroed, in [0, 1), got " + fmt(v));
      else d.channels.prune = v;
    }
  }

  // scores_section = "scores:" "{" NAME ":" PROGRAM { "," NAME ":" PROGRAM } "}" ;  each PROGRAM
  // defines score[t] like `score`; select.stages names them (core/engine/staged_selection.h). A
  // program no stage names is an error (it would never run), as is a window signal without observe.
  void stage_score_programs(const YAML::Node& root) {
    const YAML::Node scores = root["scores"];
    if (!scores) return;
    if (!scores.IsMap() || scores.size() == 0 || scores.size() > kMaxStages) {
      diag_.error(pos_of(scores), "'scores' must be a mapping of 1 to " + std::to_string(kMaxStages) + " NAME: PROGRAM entries");
      return;
    }
    int i = 1;
    for (auto it = scores.begin(); it != scores.end(); ++it, ++i) {
      const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!valid_name(name) || name == "score") {
        diag_.error(pos_of(it->first), "a score program's name must be a plain name other than 'score'");
        continue;
      }
      bool used = false;
      for (const PolicySelect::Stage& st : out_.desc.select.stages) used = used || st.program == i;
      if (!used) diag_.error(pos_of(it->first), "score program '" + name + "' is named by no stage of select.stages");
      out_.stage_scores.push_back(program_node(it->second, name.c_str(), ProgramContext::Score));
      for (const kvevict::TensorSignalInfo& info : kvevict::kTensorSignalTable)
        if (info.source == kvevict::SignalSource::WindowQueries && out_.stage_scores.back().uses[kvevict::signal_index(info.id)] &&
            !root["observe"])
          diag_.error(pos_of(it->first), "'" + name + "' reads the " + std::string(info.description) + " " +
                                             std::string(info.dsl_name) + ", but the file has no 'observe: {window: ...}'");
    }
  }

  // head_mode / head_weight (core/engine/head_budgets.h) split a layer's budget per KV head: only
  // the kv_head scope selects per head with its own budget, and only a one-shot split (no
  // cascading re-split, no unfolded GQA) keeps the plans of a layer valid. Returns whether the
  // file has either program.
  bool check_head_programs(const YAML::Node& root) {
    bool any = false;
    for (const char* key : {"head_mode", "head_weight"}) {
      if (!root[key]) continue;
      any = true;
      const PolicyDescription& d = out_.desc;
      if (d.select.scope != SelectScope::KvHead)
        diag_.error(pos_of(root[key]), std::string("'") + key + "' needs select scope kv_head (scope " +
                                           std::string(ModeNames<SelectScope>::names[static_cast<int>(d.select.scope)]) +
                                           " decides the heads' budgets itself)");
      if (d.run.cascading) diag_.error(pos_of(root[key]), std::string("'") + key + "' cannot be combined with run.cascading");
      if (d.select.unfold_gqa) diag_.error(pos_of(root[key]), std::string("'") + key + "' cannot be combined with select.unfold_gqa");
    }
    return any;
  }

  std::string path_, text_;
  std::vector<std::string> lines_;
  Diagnostics diag_;
  CompiledPolicy out_;
  CheckOptions opts_;
  std::vector<FilePos> param_pos_;
  std::unordered_map<std::string, size_t> param_index_;  // name -> index in out_.params
};

}  // namespace

CompiledPolicy compile_policy_text(const std::string& path, const std::string& text,
                                   const std::map<std::string, std::string>& overrides) {
  FileCompiler c(path, text);
  return c.run(overrides);
}

CompiledPolicy compile_policy_file(const std::string& path, const std::map<std::string, std::string>& overrides) {
  return compile_policy_text(path, read_input_file(path, InputLimits::kPolicyFile, "policy file"), overrides);
}

}  // namespace kvevict::dsl
