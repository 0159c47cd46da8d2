// Every file a user names, as the CLI opens it: a FIFO, /dev/zero, /dev/urandom or a directory
// where a file is expected is refused up front with exit 2 and a message naming the file and what
// it is (core/util/input_file.h). Each command runs under `timeout` and a memory cap, so a
// regression (a FIFO that blocks the open, /dev/zero read until memory runs out) fails the test
// instead of hanging it or exhausting the machine.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../core/llama2c_writer.h"
#include "core/model/synthetic_model.h"
#include "process.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;

// 60 s and 4 GiB: far more than any of these commands needs when it works. The memory cap is the
// address space normally; an AddressSanitizer build reserves terabytes of shadow address space, so
// there the cap is ASan's own resident-memory limit instead.
#if defined(__SANITIZE_ADDRESS__)
const char* const kMemoryCap = "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=4096\"; ";
#else
const char* const kMemoryCap = "ulimit -v 4194304; ";
#endif

CommandResult run_bounded(const std::string& args) {
  return test::run_shell(std::string(kMemoryCap) + "timeout -k 5 60 " + std::string(KVEVICT_BINARY) + " " + args +
                         " </dev/null");
}

void expect_refused(const CommandResult& r, const std::string& args, const std::string& file, const std::string& kind) {
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;  // 124: it hung
  EXPECT_NE(r.output.find(file), std::string::npos) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(kind), std::string::npos) << args << "\n" << r.output;
}

class RobustInputCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kvevict_robust_input_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const auto model = make_random_model(test::llama2c_config(), 7);
    checkpoint_ = test::write_llama2c(*model, "kvevict_robust_input_llama2c_" + std::to_string(::getpid()), false);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(fs::path(checkpoint_).parent_path());
  }
  std::string fifo(const std::string& name) {
    const std::string path = (dir_ / name).string();
    EXPECT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
    return path;
  }
  // Every command that opens a user-named file, with {} where the file goes.
  std::vector<std::string> commands_taking_a_file() const {
    return {"model-info {}",
            "generate -m {} -n 1",
            "model-info " + checkpoint_ + " --tokenizer {}",
            "generate -m " + checkpoint_ + " --tokenizer {} -n 1",
            "generate -m synthetic:tiny -n 1 --prompt-file {}",
            "inspect -m synthetic:tiny --policy streamingllm --budget 4 --prompt-file {}",
            "check {}"};
  }
  static std::string with(std::string command, const std::string& file) {
    return command.replace(command.find("{}"), 2, file);
  }
  fs::path dir_;
  std::string checkpoint_;
};

TEST_F(RobustInputCli, AFifoIsRefusedByNameWithoutHanging) {
  const std::string f = fifo("input.fifo");
  for (const std::string& command : commands_taking_a_file()) {
    const std::string args = with(command, f);
    expect_refused(run_bounded(args), args, f, "FIFO");
  }
  // A policy named by path, and a .cu file handed to compile (refused before NVRTC is involved).
  const std::string policy = fifo("policy.yaml");
  expect_refused(run_bounded("generate -m synthetic:tiny -n 1 --policy " + policy + " --budget 4"), "--policy", policy, "FIFO");
  const std::string cuda = fifo("kernel.cu");
  expect_refused(run_bounded("compile --arch sm_80 --no-cache " + cuda), "compile", cuda, "FIFO");
}

TEST_F(RobustInputCli, DevZeroAndDevUrandomAreRefusedByName) {
  for (const std::string device : {"/dev/zero", "/dev/urandom"}) {
    for (const std::string& command : commands_taking_a_file()) {
      const std::string args = with(command, device);
      expect_refused(run_bounded(args), args, device, "character device");
    }
  }
}

TEST_F(RobustInputCli, ADirectoryWhereAFileIsExpectedIsRefusedByName) {
  const std::string sub = (dir_ / "folder").string();
  fs::create_directories(sub);
  expect_refused(run_bounded("check " + sub), "check", sub, "a directory");
  // A folder given as a model is read as a Hugging Face folder: without config.json it says so.
  expect_refused(run_bounded("model-info " + sub), "model-info", sub, "no config.json");
  // A config.json that is a directory or a FIFO is named, not reported as missing.
  fs::create_directories(dir_ / "hf_dir" / "config.json");
  expect_refused(run_bounded("model-info " + (dir_ / "hf_dir").string()), "config.json dir",
                 (dir_ / "hf_dir" / "config.json").string(), "a directory");
  fs::create_directories(dir_ / "hf_fifo");
  const std::string config = fifo("hf_fifo/config.json");
  expect_refused(run_bounded("model-info " + (dir_ / "hf_fifo").string()), "config.json FIFO", config, "FIFO");
}

TEST_F(RobustInputCli, ATokenizerNextToTheCheckpointThatIsNotAFileIsNamed) {
  const fs::path tokenizer = fs::path(checkpoint_).parent_path() / "tokenizer.bin";
  fs::remove(tokenizer);
  ASSERT_EQ(::mkfifo(tokenizer.c_str(), 0600), 0);
  expect_refused(run_bounded("model-info " + checkpoint_), "tokenizer.bin FIFO", tokenizer.string(), "FIFO");
}

}  // namespace
}  // namespace kvevict
