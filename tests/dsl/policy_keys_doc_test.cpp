// docs/DSL.md's key table documents exactly the keys the loader accepts (dsl/policy_keys.h), and
// the loader rejects a key outside them at its line and column.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "core/util/error.h"
#include "dsl/policy_file.h"
#include "dsl/policy_keys.h"

namespace kvevict::dsl {
namespace {

std::string read_dsl_doc() {
  std::ifstream in(std::string(KVEVICT_TEST_SOURCE_DIR) + "/../docs/DSL.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Rows "| `key` | required | value |" of the key table: key -> value column.
std::map<std::string, std::string> key_table(const std::string& doc) {
  std::map<std::string, std::string> rows;
  const std::regex row(R"(^\| `(\w+)` \| (yes|no) \| (.*)\|\s*$)");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, row)) rows[m[1]] = m[3];
  }
  return rows;
}

// The keys "name:" inside the first {...} of a value column.
std::set<std::string> keys_in_braces(const std::string& value) {
  std::set<std::string> keys;
  const size_t open = value.find('{'), close = value.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return keys;
  const std::string inside = value.substr(open + 1, close - open - 1);
  const std::regex key(R"((\w+):)");
  for (auto it = std::sregex_iterator(inside.begin(), inside.end(), key); it != std::sregex_iterator(); ++it)
    keys.insert((*it)[1]);
  return keys;
}

TEST(PolicyKeysDoc, TheKeyTableListsEveryTopLevelKeyAndNoOther) {
  const auto rows = key_table(read_dsl_doc());
  ASSERT_FALSE(rows.empty()) << "docs/DSL.md has no key table";
  std::set<std::string> documented;
  for (const auto& [key, value] : rows) documented.insert(key);
  EXPECT_EQ(documented, policy_top_level_keys());
}

TEST(PolicyKeysDoc, EverySectionRowListsExactlyTheKeysTheLoaderAccepts) {
  const auto rows = key_table(read_dsl_doc());
  for (const auto& [section, keys] : policy_section_keys()) {
    ASSERT_TRUE(rows.count(section)) << section;
    EXPECT_EQ(keys_in_braces(rows.at(section)), keys) << "docs/DSL.md row of '" << section << "'";
  }
}

TEST(PolicyKeysDoc, TheParameterSectionShowsEveryDeclarationKey) {
  const std::string doc = read_dsl_doc();
  const size_t from = doc.find("## 2. Parameters"), to = doc.find("## 3.", from);
  ASSERT_NE(from, std::string::npos);
  const std::string part = doc.substr(from, to - from);
  for (const std::string& key : policy_parameter_keys())
    EXPECT_NE(part.find(key + ":"), std::string::npos) << "DSL.md §2 does not show '" << key << ":'";
}

// observe.replay's mapping is shown after the key table as "REPLAY = `{...}`".
TEST(PolicyKeysDoc, TheReplayMappingListsExactlyTheKeysTheLoaderAccepts) {
  const std::string doc = read_dsl_doc();
  const size_t at = doc.find("REPLAY = `{");
  ASSERT_NE(at, std::string::npos) << "docs/DSL.md does not show observe.replay's mapping (REPLAY = `{...}`)";
  EXPECT_EQ(keys_in_braces(doc.substr(at, doc.find('}', at) - at + 1)), policy_replay_keys());
}

TEST(PolicyKeys, AKeyOutsideTheTableIsAnErrorAtItsPosition) {
  const std::string text =
      "name: x\nabout: y\nselect: {scope: layer_shared, top_p: 0.9}\nscore: |\n  score[t] = pos[t]\n";
  try {
    compile_policy_text("bad.yaml", text);
    ADD_FAILURE() << "an unknown select key was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.yaml:3:"), std::string::npos) << what;
    EXPECT_NE(what.find("top_p"), std::string::npos) << what;
  }
  // And every mode spelling in the table is accepted where the doc says.
  for (const char* scope : {"kv_head", "layer", "layer_shared"})
    EXPECT_NO_THROW(compile_policy_text(
        "ok.yaml", std::string("name: x\nabout: y\nselect: {scope: ") + scope + "}\nscore: |\n  score[t] = pos[t]\n"));
}

}  // namespace
}  // namespace kvevict::dsl
