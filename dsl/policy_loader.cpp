#include "dsl/policy_loader.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/util/error.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"

namespace kvevict {
namespace fs = std::filesystem;

// The built-in policies: the methods kvevict was built around, then policies/field/, the other
// methods of the field written as policy files (docs/POLICIES.md). A top-level file shadows a field
// file of the same name.
std::vector<std::string> builtin_policy_dirs() { return {KVEVICT_POLICY_DIR, std::string(KVEVICT_POLICY_DIR) + "/field"}; }

std::vector<std::string> policy_search_path(const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> dirs = extra_dirs;
  if (const char* home = std::getenv("HOME"); home && *home) dirs.push_back(std::string(home) + "/.config/kvevict/policies");
  for (const auto& dir : builtin_policy_dirs()) dirs.push_back(dir);
  return dirs;
}

namespace {

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && (s.ends_with(".yaml") || s.ends_with(".yml")));
}

std::vector<fs::path> policy_files_in(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    auto ext = entry.path().extension().string();
    if (ext == ".yaml" || ext == ".yml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> builtin_policy_files() {
  std::vector<std::string> files;
  for (const std::string& dir : builtin_policy_dirs())
    for (const fs::path& file : policy_files_in(dir)) files.push_back(file.string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string resolve_policy_path(const std::string& name_or_path, const std::vector<std::string>& extra_dirs) {
  std::error_code ec;
  if (looks_like_path(name_or_path)) {
    // Only absence is decided here; a path that is a directory, a FIFO or a device is refused with
    // what it is when it is opened (core/util/input_file.h).
    if (!fs::exists(fs::symlink_status(name_or_path, ec))) throw UsageError(name_or_path + ": error: policy file not found");
    return name_or_path;
  }
  std::set<std::string> known;
  for (const auto& dir : policy_search_path(extra_dirs)) {
    for (const char* ext : {".yaml", ".yml"}) {
      fs::path p = fs::path(dir) / (name_or_path + ext);
      if (fs::is_regular_file(p, ec)) return p.string();
    }
    for (const auto& f : policy_files_in(dir)) known.insert(f.stem().string());
  }
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  throw UsageError("unknown policy '" + name_or_path + "' (known: " + list + ")");
}

std::unique_ptr<PolicyProgram> load_policy(const std::string& name_or_path, const std::map<std::string, std::string>& overrides,
                                           const std::vector<std::string>& extra_dirs) {
  const std::string path = resolve_policy_path(name_or_path, extra_dirs);
  return std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(path, overrides));
}

std::vector<PolicyListing> list_policies(const std::vector<std::string>& extra_dirs) {
  std::vector<PolicyListing> out;
  std::set<std::string> seen;
  std::set<std::string> builtin_dirs;
  std::error_code ec;
  for (const auto& dir : builtin_policy_dirs()) builtin_dirs.insert(fs::weakly_canonical(dir, ec).string());
  for (const auto& dir : policy_search_path(extra_dirs)) {
    const bool builtin = builtin_dirs.count(fs::weakly_canonical(dir, ec).string()) > 0;
    for (const auto& f : policy_files_in(dir)) {
      const std::string name = f.stem().string();
      if (seen.count(name)) continue;  // an earlier directory shadows a later one
      seen.insert(name);
      dsl::CompiledPolicy c = dsl::compile_policy_file(f.string());
      PolicyListing l;
      l.name = c.desc.name;
      l.path = f.string();
      l.about = c.desc.about.substr(0, c.desc.about.find('\n'));
      l.builtin = builtin;
      for (const auto& p : c.params) l.params.push_back({p.name, p.type, p.value_text(p.default_value), p.range_text(), p.doc});
      out.push_back(std::move(l));
    }
  }
  return out;
}

}  // namespace kvevict
