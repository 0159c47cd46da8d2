// The one file-opening rule (core/util/input_file.h): regular files only, opened without blocking,
// read with a limit; every refusal is an InputError (exit 2) naming the file.
#include "core/util/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/util/error.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvevict_input_file_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // The message of the InputError that f throws; fails the test if it throws anything else.
  template <typename F>
  std::string input_error(F f) {
    try {
      f();
    } catch (const InputError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return e.what();
    }
    ADD_FAILURE() << "no InputError";
    return "";
  }
  fs::path dir_;
};

TEST_F(InputFileTest, ReadsARegularFileWhole) {
  const std::string p = write("a.txt", std::string("abc\0def", 7));
  EXPECT_EQ(read_input_file(p, 100, "prompt file"), std::string("abc\0def", 7));
  EXPECT_EQ(read_input_file(write("empty.txt", ""), 100, "prompt file"), "");
}

TEST_F(InputFileTest, RefusesAFileAboveItsLimitNamingIt) {
  const std::string p = write("big.txt", std::string(101, 'x'));
  const std::string msg = input_error([&] { read_input_file(p, 100, "policy file"); });
  EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << msg;
  EXPECT_NE(msg.find("101 bytes"), std::string::npos) << msg;
  EXPECT_EQ(read_input_file(p, 101, "policy file").size(), 101u);
}

TEST_F(InputFileTest, RefusesMissingFilesDirectoriesFifosAndDevices) {
  EXPECT_NE(input_error([&] { read_input_file((dir_ / "nope").string(), 10, "config"); }).find("cannot open config"),
            std::string::npos);
  EXPECT_NE(input_error([&] { read_input_file(dir_.string(), 10, "config"); }).find("a directory"),
            std::string::npos);
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without O_NONBLOCK this open would wait for a writer forever.
  EXPECT_NE(input_error([&] { read_input_file(fifo, 10, "model"); }).find("a FIFO"), std::string::npos);
  EXPECT_NE(input_error([&] { read_input_file("/dev/zero", 10, "model"); }).find("a character device"),
            std::string::npos);
  EXPECT_NE(input_error([&] { read_input_file("", 10, "model"); }).find("no model file named"), std::string::npos);
}

TEST_F(InputFileTest, DirectoryRule) {
  EXPECT_NO_THROW(require_input_directory(dir_.string(), "model folder"));
  const std::string p = write("f.txt", "x");
  EXPECT_NE(input_error([&] { require_input_directory(p, "model folder"); }).find("must be a directory"),
            std::string::npos);
}

}  // namespace
}  // namespace kvevict
