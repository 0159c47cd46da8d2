// Policy files a stranger wrote, through `kvevict check`: a key given twice is refused at its
// line:col (yaml-cpp would run the first `score:`), non-finite parameter values are refused, and
// a file with 150k parameter declarations is checked (the parameter registry is indexed, so this
// is linear; it used to compare every new name with every earlier one).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "process.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

CommandResult kvevict_cli(const std::string& args) {
  return test::run_shell("timeout -k 5 300 " + std::string(KVEVICT_BINARY) + " " + args + " </dev/null");
}

class RobustPolicyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kvevict_robust_policy_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

constexpr const char* kHead = "name: p\nabout: a test policy\n";

TEST_F(RobustPolicyCli, ADuplicateKeyIsRefusedAtItsPosition) {
  const std::string twice = file("twice.yaml", std::string(kHead) + "score: |\n  score[t] = -pos[t]\nscore: |\n  score[t] = pos[t]\n");
  CommandResult r = kvevict_cli("check " + twice);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(twice + ":5:1: error: duplicate key 'score' (first at line 3)"), std::string::npos) << r.output;
  // Nested: a parameter declared twice, and a key twice inside a declaration.
  const std::string param = file("param.yaml", std::string(kHead) + "params:\n  w: {int: 4}\n  w: {int: 8}\nscore: |\n  score[t] = w\n");
  r = kvevict_cli("check " + param);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(param + ":5:3: error: duplicate key 'w' (first at line 4)"), std::string::npos) << r.output;
  const std::string inner = file("inner.yaml", std::string(kHead) + "params:\n  w: {int: 4, max: 9, max: 2}\nscore: |\n  score[t] = w\n");
  r = kvevict_cli("check " + inner);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("duplicate key 'max'"), std::string::npos) << r.output;
  // The same file used through --policy is refused too (not only by check).
  r = kvevict_cli("inspect -m synthetic:tiny -p 'a b c d e' --budget 2 --policy " + twice);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("duplicate key 'score'"), std::string::npos) << r.output;
}

TEST_F(RobustPolicyCli, NonFiniteParameterValuesAreRefused) {
  const char* decls[] = {"{float: nan}", "{float: .nan}", "{float: NaN}", "{float: inf}", "{float: -.inf}",
                         "{float: 1e999}", "{float: 1, max: nan}", "{float: 1, min: -inf}", "{fraction: nan}",
                         "{int: inf}"};
  for (const char* decl : decls) {
    const std::string path =
        file("nan.yaml", std::string(kHead) + "params:\n  w: " + decl + "\nscore: |\n  score[t] = w * pos[t]\n");
    const CommandResult r = kvevict_cli("check " + path);
    EXPECT_EQ(r.exit_code, 2) << decl << "\n" << r.output;
    EXPECT_NE(r.output.find(path + ":4:"), std::string::npos) << decl << "\n" << r.output;
    EXPECT_NE(r.output.find("parameter 'w'"), std::string::npos) << decl << "\n" << r.output;
  }
  const std::string good = file("good.yaml", std::string(kHead) + "params:\n  w: {float: 2}\nscore: |\n  score[t] = w * pos[t]\n");
  EXPECT_EQ(kvevict_cli("check " + good).exit_code, 0);
}

TEST_F(RobustPolicyCli, AFileWithManyParametersIsChecked) {
  constexpr int kParams = 150000;
  std::string text = std::string(kHead) + "params:\n";
  for (int i = 0; i < kParams; ++i) text += "  p" + std::to_string(i) + ": {float: " + std::to_string(i % 7) + "}\n";
  text += "score: |\n  score[t] = p149999 * pos[t] + p0\n";
  const std::string path = file("many.yaml", text);
  const CommandResult r = kvevict_cli("check " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(0, 2000);
  // 150k declared plus the implicit kept_order.
  EXPECT_NE(r.output.find(path + ": ok: p (" + std::to_string(kParams + 1) + " params"), std::string::npos)
      << r.output.substr(0, 2000);
  // A name declared twice among them is found, with the line of its first declaration.
  std::string dup = text;
  dup.insert(dup.find("score: |"), "  p77777: {float: 1}\n");
  const std::string dup_path = file("many_dup.yaml", dup);
  const CommandResult d = kvevict_cli("check " + dup_path);
  EXPECT_EQ(d.exit_code, 2) << d.output.substr(0, 2000);
  EXPECT_NE(d.output.find("duplicate key 'p77777' (first at line " + std::to_string(4 + 77777) + ")"), std::string::npos)
      << d.output.substr(0, 2000);
}

}  // namespace
}  // namespace kvevict
