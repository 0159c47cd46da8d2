#pragma once
// Finding, checking and compiling policy files. A policy is named by a built-in name ("cake"),
// a name found in a search directory (~/.config/kvevict/policies, --policy-path DIR), or a path to
// a file. Every error (YAML, lexical, syntax, type, shape, parameter range) throws UsageError whose
// message lists all errors of the file as "file:line:col: error: message" + source line + caret.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/policy_program.h"

namespace kvevict {

struct PolicyParamInfo {
  std::string name;
  std::string type;           // int | float | bool | enum | fraction
  std::string default_value;  // as text
  std::string range;          // e.g. "min 1", "0..1", "avg|max"; empty if unconstrained
  std::string doc;
};

struct PolicyListing {
  std::string name;
  std::string path;
  std::string about;  // one line
  bool builtin = false;
  std::vector<PolicyParamInfo> params;
};

// The built-in policy directories: policies/ and policies/field/ of the source tree.
std::vector<std::string> builtin_policy_dirs();
// Every policy file (.yaml, .yml) in the built-in directories, as paths sorted as strings.
std::vector<std::string> builtin_policy_files();

// Directories searched for policy names, in order: extra_dirs, ~/.config/kvevict/policies, the built-in dirs.
std::vector<std::string> policy_search_path(const std::vector<std::string>& extra_dirs = {});

// Resolves a name or path to a file path; throws UsageError("unknown policy 'x' (known: ...)").
std::string resolve_policy_path(const std::string& name_or_path, const std::vector<std::string>& extra_dirs = {});

// Loads, checks and compiles a policy with parameter overrides (name -> value text).
// Unknown parameter names and values outside the declared range are errors.
std::unique_ptr<PolicyProgram> load_policy(const std::string& name_or_path,
                                           const std::map<std::string, std::string>& overrides = {},
                                           const std::vector<std::string>& extra_dirs = {});

std::vector<PolicyListing> list_policies(const std::vector<std::string>& extra_dirs = {});

}  // namespace kvevict
