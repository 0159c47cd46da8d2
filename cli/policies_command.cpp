// `kvevict policies [--policy-path DIR]`: the available policies, their one-line description and
// their parameters with defaults and ranges.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "dsl/policy_loader.h"

namespace kvevict::cli {
namespace {

std::function<int()> setup_policies(CLI::App& app) {
  auto dirs = std::make_shared<std::vector<std::string>>();
  app.add_option("--policy-path", *dirs, "Extra directory of policy files (searched first; repeatable)");
  return [dirs] {
    for (const auto& p : list_policies(*dirs)) {
      std::cout << p.name << (p.builtin ? "" : "  [" + p.path + "]") << "\n    " << p.about << "\n";
      for (const auto& param : p.params) {
        std::cout << "    --param " << param.name << "=" << param.default_value << "  (" << param.type;
        if (!param.range.empty()) std::cout << ", " << param.range;
        std::cout << ")";
        if (!param.doc.empty()) std::cout << "  " << param.doc;
        std::cout << "\n";
      }
    }
    return 0;
  };
}

KVEVICT_COMMAND("policies", "List the available policies and their parameters", setup_policies, 41);

}  // namespace
}  // namespace kvevict::cli
