#pragma once
// The policy-file compiler (FileCompiler, the private half of policy_file.h), shared by the files
// that implement it, one concern each:
//   policy_file.cpp           the public calls (compile_policy_text / _file, ParamDecl, the setting
//                             evaluators), run() (the order of the whole file's checks) and the
//                             helpers every part uses (positions, key checks, a program's origin);
//   policy_file_params.cpp    `params:`, the implicit kept_order parameter and the overrides;
//   policy_file_settings.cpp  the setting expressions and the observe, protect, run and merge
//                             sections, with the checks across them;
//   policy_file_select.cpp    the select section: its rules beyond top-k and its stages;
//   policy_file_programs.cpp  the programs (score, decode_score, the weights, channel_score,
//                             scores:) and what the description records of what they read.
// Every part reports into one Diagnostics, so a file's every error is listed in one run; the order
// of the calls in run() and settings() is the order of the messages.
// Not a public header: only dsl/policy_file*.cpp include it.
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/engine/policy_modes.h"
#include "core/engine/segment_checks.h"
#include "dsl/diagnostics.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl::policy_file_detail {

// A number as the messages print it (ostream's default format).
inline std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

class FileCompiler {
 public:
  FileCompiler(const std::string& path, const std::string& text);

  // Compiles the whole file; throws UsageError listing every error (policy_file.cpp).
  CompiledPolicy run(const std::map<std::string, std::string>& overrides);

 private:
  // Shared helpers (policy_file.cpp): a node's file position, unknown keys of a mapping, a string
  // field, and where a scalar's text starts in the file (false, reported, for a folded block).
  FilePos pos_of(const YAML::Node& n) const;
  void check_keys(const YAML::Node& map, const std::set<std::string>& allowed, const std::string& what);
  std::string string_field(const YAML::Node& root, const char* key);
  bool origin_of(const YAML::Node& n, TextOrigin& o);

  // Parameters (policy_file_params.cpp): declarations into out_.params / out_.bindings, the
  // implicit kept_order parameter, and the command line's overrides of their values.
  void params(const YAML::Node& node);
  int add_implicit_kept_order(const YAML::Node& root);
  void register_param(const ParamDecl& d);
  static bool valid_name(const std::string& n);
  static bool reserved_name(const std::string& n);
  bool parse_value(const ParamDecl& d, const std::string& text, double& out, FilePos at, const std::string& what);
  void apply_overrides(const std::map<std::string, std::string>& overrides);

  // Setting expressions (policy_file_settings.cpp): one checked scalar program, or its constant
  // value; a checked mapping section; the integer, length and mode settings built on them.
  LoweredProgram setting(const YAML::Node& n, bool want_bool, bool allow_prompt_len, bool decode_budget_inputs = false);
  bool constant_setting(const YAML::Node& parent, const char* key, bool want_bool, double& out);
  YAML::Node section(const YAML::Node& root, const char* key);
  void int_setting(const YAML::Node& parent, const char* key, LoweredProgram& program, int& value);
  void length_setting(const YAML::Node& parent, const char* key, int& out);
  template <class Mode>
  Mode choice(const YAML::Node& parent, const char* key, Mode fallback);
  void report_setting_errors(const YAML::Node& root, const std::vector<SettingError>& errors);

  // The sections (policy_file_settings.cpp, select in policy_file_select.cpp), in file-check
  // order. protect, run and select take the node itself (not a const reference) because they
  // index it as settings() always did: yaml-cpp's non-const operator[] records an absent key.
  void settings(const YAML::Node& root);
  void observe_settings(const YAML::Node& observe);
  void query_observe_settings(const YAML::Node& observe);
  void replay_settings(const YAML::Node& observe);
  void protect_settings(YAML::Node& protect);
  void run_settings(YAML::Node& run);
  void select_settings(const YAML::Node& root, YAML::Node& select);
  void selection_rule_settings(const YAML::Node& root, const YAML::Node& select);
  void stages_setting(const YAML::Node& root, const YAML::Node& stages);
  void share_stage_checks(const YAML::Node& stages);
  void merge_settings(const YAML::Node& merge);
  void phase_checks(const YAML::Node& run, const YAML::Node& protect);
  void query_key_checks(const YAML::Node& root);  // run() calls it once the programs' reads are known

  // Programs (policy_file_programs.cpp): each program key parsed, checked and lowered; the
  // description's reads and the checks that depend on which programs the file has.
  LoweredProgram program(const YAML::Node& root, const char* key, ProgramContext ctx);
  LoweredProgram program_node(const YAML::Node& n, const char* key, ProgramContext ctx);
  void programs(const YAML::Node& root);
  void channel_settings(const YAML::Node& root);
  void stage_score_programs(const YAML::Node& root);
  bool check_head_programs(const YAML::Node& root);

  static constexpr size_t kMaxStages = 8;  // select.stages and scores: entries

  std::string path_, text_;
  std::vector<std::string> lines_;
  Diagnostics diag_;
  CompiledPolicy out_;
  CheckOptions opts_;
  std::unordered_map<std::string, size_t> param_index_;  // name -> index in out_.params
};

// A mode key (core/engine/policy_modes.h): one of the mode's spellings, or the name of an enum
// parameter whose value is one of them.
template <class Mode>
Mode FileCompiler::choice(const YAML::Node& parent, const char* key, Mode fallback) {
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

}  // namespace kvevict::dsl::policy_file_detail
