// A policy file's parameters (FileCompiler, policy_file_compiler.h): the `params:` declarations,
// the kept_order parameter every policy has, and the overrides of their values.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "dsl/builtin_names.h"
#include "dsl/policy_file_compiler.h"
#include "dsl/policy_keys.h"

namespace kvevict::dsl::policy_file_detail {

// params: NAME: {TYPE: DEFAULT, min:, max:, doc:} | {enum: [..], default:, doc:}
void FileCompiler::params(const YAML::Node& node) {
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
      register_param(d);
      continue;
    }
    if (spec["doc"]) d.doc = spec["doc"].Scalar();
    if (d.type == "enum") {
      if (!def.IsSequence() || def.size() == 0) { diag_.error(pos_of(def), "enum options must be a non-empty list, e.g. [avg, max]"); d.options = {"?"}; register_param(d); continue; }
      for (const auto& o : def) d.options.push_back(o.IsScalar() ? o.Scalar() : "?");
      if (!spec["default"]) { diag_.error(at, "enum parameter '" + d.name + "' needs a default"); register_param(d); continue; }
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
      if (d.has_min && d.has_max && d.min > d.max) { diag_.error(at, "parameter '" + d.name + "': min is larger than max"); register_param(d); continue; }
      parse_value(d, def.Scalar(), d.default_value, pos_of(def), "default");
    }
    if (param_index_.count(d.name)) diag_.error(at, "parameter '" + d.name + "' is declared twice");
    // A parameter with a bad declaration is still registered (the file fails anyway), so its
    // uses are not reported again as unknown names.
    register_param(d);
  }
}

// kept_order is an engine mechanism every policy has (spec §8 "kept_order (all policies)"), so
// it is a parameter of every file without a declaration in each: unless the file declares its
// own `kept_order` parameter or points select.kept_order at another enum parameter, an enum
// parameter kept_order [positional, score] is added whose default is the file's literal
// select.kept_order (else positional). It is overridable and recorded like any parameter.
// Returns its binding index, or -1 when the file governs kept_order itself.
int FileCompiler::add_implicit_kept_order(const YAML::Node& root) {
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
  register_param(d);
  return static_cast<int>(out_.params.size()) - 1;
}

// The first declaration of a name wins; the index keeps a file with many parameters linear.
void FileCompiler::register_param(const ParamDecl& d) {
  if (!param_index_.emplace(d.name, out_.params.size()).second) return;
  ParamBinding b;
  b.name = d.name;
  b.type = d.type == "bool" ? Type::Bool : d.type == "enum" ? Type::Enum : Type::Number;
  b.value = d.default_value;
  b.options = d.options;
  out_.params.push_back(d);
  out_.bindings.push_back(b);
}

bool FileCompiler::valid_name(const std::string& n) {
  if (n.empty() || !(std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_')) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

bool FileCompiler::reserved_name(const std::string& n) {
  return is_builtin_name(n) || n == "score" || n == "layer_weight" || n == "head_weight" || n == "head_mode" ||
         n == "channel_score";
}

// Parses `text` as a value of d's type and checks d's range. `what` names the value in messages.
bool FileCompiler::parse_value(const ParamDecl& d, const std::string& text, double& out, FilePos at, const std::string& what) {
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

void FileCompiler::apply_overrides(const std::map<std::string, std::string>& overrides) {
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

}  // namespace kvevict::dsl::policy_file_detail
