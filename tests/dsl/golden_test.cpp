// Golden tests of error messages: every tests/dsl/golden/NAME.yaml must fail to compile with
// exactly the text in NAME.expected (all errors, file:line:col, source line, caret).
// Set KVEVICT_UPDATE_GOLDEN=1 to rewrite the .expected files after an intended message change
// (then review the diff).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/util/error.h"
#include "dsl/policy_file.h"

namespace fs = std::filesystem;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(DslGolden, EveryCaseReportsExactlyTheExpectedErrors) {
  const fs::path dir = fs::path(KVEVICT_TEST_SOURCE_DIR) / "dsl" / "golden";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".yaml") cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  ASSERT_GE(cases.size(), 20u) << "at least 20 kinds of mistakes are covered";
  const bool update = std::getenv("KVEVICT_UPDATE_GOLDEN") != nullptr;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.filename().string());
    std::string got;
    try {
      kvevict::dsl::compile_policy_text(c.filename().string(), read_all(c));
      ADD_FAILURE() << "compiled without error";
      continue;
    } catch (const kvevict::UsageError& e) {
      got = e.what();
    }
    fs::path expected_path = c;
    expected_path.replace_extension(".expected");
    if (update) {
      std::ofstream(expected_path, std::ios::binary) << got;
      continue;
    }
    ASSERT_TRUE(fs::exists(expected_path)) << "missing " << expected_path;
    EXPECT_EQ(got, read_all(expected_path));
  }
}

}  // namespace
