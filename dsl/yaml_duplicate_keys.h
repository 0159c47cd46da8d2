#pragma once
// yaml-cpp accepts a mapping with the same key twice and `node[key]` silently returns the first,
// so a policy file with two `score:` keys (or a config with two `model:` keys) would run the one
// the author did not mean. Every YAML file kvevict reads goes through this check.
#include <string>

#include <yaml-cpp/yaml.h>

namespace kvevict::dsl {

// Throws UsageError "<file>:<line>:<col>: error: duplicate key '<k>' (first at line L)" for the
// first mapping anywhere in `root` (at any depth) that holds a scalar key twice.
void reject_duplicate_keys(const YAML::Node& root, const std::string& file);

}  // namespace kvevict::dsl
