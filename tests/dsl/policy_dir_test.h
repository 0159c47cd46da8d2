#pragma once
// A test fixture for policies that read files next to them (tables): a fresh folder per test,
// files written into it, a policy text compiled as `DIR/p.yaml`, and error messages with the
// folder's path replaced by "DIR" (and the policy's by "p.yaml"), so golden messages do not depend
// on the temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/util/error.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl::test {

class PolicyDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("kvevict_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }
  std::string policy_path() const { return (dir_ / "p.yaml").string(); }

  // Compiles `text` as DIR/p.yaml into compiled_; returns the UsageError's message ("" if none).
  std::string compile_text(const std::string& text) {
    try {
      compiled_ = compile_policy_text(policy_path(), text);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    }
  }
  // The first line of a message with the policy path replaced by "p.yaml" and the folder by "DIR".
  std::string first_line(std::string m) const {
    m = m.substr(0, m.find('\n'));
    for (std::string from : {policy_path(), dir_.string()}) {
      const std::string to = from == policy_path() ? "p.yaml" : "DIR";
      for (size_t i; (i = m.find(from)) != std::string::npos;) m.replace(i, from.size(), to);
    }
    return m;
  }

  std::filesystem::path dir_;
  CompiledPolicy compiled_;
};

}  // namespace kvevict::dsl::test
