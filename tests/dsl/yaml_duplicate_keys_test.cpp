#include "dsl/yaml_duplicate_keys.h"

#include <gtest/gtest.h>

#include "core/util/error.h"

namespace kvevict::dsl {
namespace {

std::string duplicate_error(const std::string& text) {
  try {
    reject_duplicate_keys(YAML::Load(text), "p.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(YamlDuplicateKeys, TopLevelKeyTwiceNamesBothLines) {
  EXPECT_EQ(duplicate_error("name: a\nscore: 1\nscore: 2\n"),
            "p.yaml:3:1: error: duplicate key 'score' (first at line 2)");
}

TEST(YamlDuplicateKeys, NestedInMapsAndSequences) {
  EXPECT_EQ(duplicate_error("a:\n  b: 1\n  b: 2\n"), "p.yaml:3:3: error: duplicate key 'b' (first at line 2)");
  EXPECT_EQ(duplicate_error("l:\n  - {x: 1, x: 2}\n"), "p.yaml:2:12: error: duplicate key 'x' (first at line 2)");
}

TEST(YamlDuplicateKeys, DistinctKeysPass) {
  EXPECT_EQ(duplicate_error("a: 1\nb: {a: 1, b: 2}\nc: [ {a: 1}, {a: 2} ]\n"), "");
}

}  // namespace
}  // namespace kvevict::dsl
