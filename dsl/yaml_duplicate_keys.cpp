#include "dsl/yaml_duplicate_keys.h"

#include <unordered_map>
#include <vector>

#include "core/util/error.h"

namespace kvevict::dsl {

void reject_duplicate_keys(const YAML::Node& root, const std::string& file) {
  // Iterative walk: nesting depth comes from a stranger's file, so no recursion.
  std::vector<YAML::Node> pending{root};
  while (!pending.empty()) {
    YAML::Node node = pending.back();
    pending.pop_back();
    if (node.IsMap()) {
      std::unordered_map<std::string, int> first_line;
      for (auto it = node.begin(); it != node.end(); ++it) {
        if (it->first.IsScalar()) {
          const std::string key = it->first.Scalar();
          const YAML::Mark m = it->first.Mark();
          auto [seen, inserted] = first_line.emplace(key, m.line + 1);
          if (!inserted) {
            throw UsageError(file + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) +
                             ": error: duplicate key '" + key + "' (first at line " +
                             std::to_string(seen->second) + ")");
          }
        }
        pending.push_back(it->second);
      }
    } else if (node.IsSequence()) {
      for (auto it = node.begin(); it != node.end(); ++it) pending.push_back(*it);
    }
  }
}

}  // namespace kvevict::dsl
