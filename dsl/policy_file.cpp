// The policy file's public calls (policy_file.h) and FileCompiler::run, the order of the whole
// file's checks, with the helpers every part of the compiler uses (policy_file_compiler.h lists
// the parts).
#include "dsl/policy_file.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/engine/channel_checks.h"
#include "core/engine/merge_checks.h"
#include "core/engine/query_checks.h"
#include "core/engine/replay_checks.h"
#include "core/engine/segment_checks.h"
#include "core/engine/selection_checks.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "dsl/interpreter.h"
#include "dsl/policy_file_compiler.h"
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

}  // namespace

namespace policy_file_detail {

FileCompiler::FileCompiler(const std::string& path, const std::string& text) : path_(path), text_(text), diag_(path, text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines_.push_back(line);
}

CompiledPolicy FileCompiler::run(const std::map<std::string, std::string>& overrides) {
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

FilePos FileCompiler::pos_of(const YAML::Node& n) const {
  YAML::Mark m = n.Mark();
  if (m.line < 0) return {0, 0};
  return {m.line + 1, m.column + 1};
}

void FileCompiler::check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what) {
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

std::string FileCompiler::string_field(const YAML::Node& root, const char* key) {
  YAML::Node n = root[key];
  if (!n) return "";
  if (!n.IsScalar()) { diag_.error(pos_of(n), std::string("'") + key + "' must be a string"); return ""; }
  return n.Scalar();
}

// The origin of a YAML scalar's text in the file, for mapping DSL positions.
bool FileCompiler::origin_of(const YAML::Node& n, TextOrigin& o) {
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

}  // namespace policy_file_detail

CompiledPolicy compile_policy_text(const std::string& path, const std::string& text,
                                   const std::map<std::string, std::string>& overrides) {
  policy_file_detail::FileCompiler c(path, text);
  return c.run(overrides);
}

CompiledPolicy compile_policy_file(const std::string& path, const std::map<std::string, std::string>& overrides) {
  return compile_policy_text(path, read_input_file(path, InputLimits::kPolicyFile, "policy file"), overrides);
}

}  // namespace kvevict::dsl
