// Input limits of an eval config, checked before any work starts (issue 13): duplicate keys and
// grid values, lengths above the model's context or a documented cap, continuations that do not
// fit, thread counts above the machine's cores, NaN values, and the file rule for the config and
// LongBench files. Every refusal is a UsageError (exit 2) at the value's file:line:col.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/config_reader.h"
#include "evals/sample_runner.h"

using namespace kvevict::evals;

namespace {

std::string config_with(const std::string& tasks, const std::string& extra = "") {
  return "model: \"fake:\"\n" + extra + "tasks:\n" + tasks + "policies: [a]\nbudgets: [full]\n";
}

std::string error_of(const std::string& yaml, const LoadConfigOptions& options = {}) {
  try {
    parse_eval_config(yaml, "cfg.yaml", options);
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

std::string model_error_of(const std::string& yaml, int64_t context) {
  EvalConfig config = parse_eval_config(yaml, "cfg.yaml");
  try {
    check_config_for_model(config, context);
  } catch (const kvevict::UsageError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error for a context of " << context << ":\n" << yaml;
  return "";
}

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("kvevict_limits_" + name + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

// Found by eval_config_fuzzer: std::filesystem::exists threw filesystem_error (not a kvevict
// error: the CLI would report an internal failure) on a path component longer than NAME_MAX.
TEST(ConfigLimits, AModelPathTheSystemRefusesIsAnErrorAtItsLine) {
  const std::string name(300, 'T');
  std::string message = error_of("model: /tmp/" + name + "\ntasks: {passkey: {}}\npolicies: [a]\nbudgets: [full]\n");
  EXPECT_NE(message.find("cfg.yaml:1:"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_LT(message.size(), 400u) << "the path is quoted, not copied whole";
  message = error_of("model: \"fake:\"\ntokenizer: /tmp/" + name + "\ntasks: {passkey: {}}\npolicies: [a]\nbudgets: [full]\n");
  EXPECT_NE(message.find("cfg.yaml:2:"), std::string::npos) << message;
}

TEST(ConfigLimits, ASecondModelKeyIsRefused) {
  std::string message = error_of("model: \"fake:\"\nmodel: \"fake:delay_ms=1\"\ntasks: {passkey: {}}\n"
                                 "policies: [a]\nbudgets: [full]\n");
  EXPECT_NE(message.find("cfg.yaml:2:1: error: duplicate key 'model' (first at line 1)"), std::string::npos) << message;
  // Nested mappings too (a task's options).
  message = error_of(config_with("  passkey:\n    lengths: [64]\n    lengths: [128]\n"));
  EXPECT_NE(message.find("cfg.yaml:5:5: error: duplicate key 'lengths'"), std::string::npos) << message;
}

TEST(ConfigLimits, DuplicateGridValuesAreRefusedAtTheirLocation) {
  std::string message = error_of(config_with("  passkey: {lengths: [64, 128, 64], depths: [10, 50, 10.0]}\n"));
  EXPECT_NE(message.find("cfg.yaml:3:32: error: tasks.passkey.lengths: value 64 appears twice"), std::string::npos)
      << message;
  EXPECT_NE(message.find("tasks.passkey.depths: value 10.0 appears twice"), std::string::npos) << message;
  message = error_of(config_with("  needle: {depths: [0, 0]}\n"));
  EXPECT_NE(message.find("cfg.yaml:3:24: error: tasks.needle.depths: value 0 appears twice"), std::string::npos)
      << message;
}

TEST(ConfigLimits, LengthsAboveTheCapAreRefusedWithoutAModel) {
  std::string message = error_of(config_with("  passkey: {lengths: [1048576]}\n"));
  EXPECT_NE(message.find("cfg.yaml:3:23: error: tasks.passkey.lengths: value 1048576 out of range [16, " +
                         std::to_string(kMaxEvalLength) + "]"),
            std::string::npos)
      << message;
  message = error_of(config_with("  fidelity: {lengths: [256], continuation: 65536}\n"));
  EXPECT_NE(message.find("cfg.yaml:3:44: error: tasks.fidelity.continuation: value 65536 out of range"),
            std::string::npos)
      << message;
}

TEST(ConfigLimits, LengthsAboveTheModelsContextAreRefused) {
  const std::string yaml = config_with(
      "  passkey: {lengths: [128, 4096]}\n"
      "  needle: {lengths: [600], depths: [50]}\n"
      "  fidelity: {lengths: [256], continuation: 300, greedy: 16}\n");
  // Without a model the config is fine; with a 512-token model three values are refused.
  EXPECT_NO_THROW(check_config_for_model(parse_eval_config(yaml, "cfg.yaml"), 0));
  EXPECT_NO_THROW(check_config_for_model(parse_eval_config(yaml, "cfg.yaml"), 8192));
  std::string message = model_error_of(yaml, 512);
  EXPECT_NE(message.find("cfg.yaml:3:28: error: tasks.passkey.lengths: length 4096 exceeds the model's context of "
                         "512 tokens"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("cfg.yaml:4:22: error: tasks.needle.lengths: length 600 exceeds"), std::string::npos)
      << message;
  EXPECT_NE(message.find("cfg.yaml:5:44: error: tasks.fidelity.continuation: 300 tokens after a context of 256 exceed "
                         "the model's context of 512 tokens"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("greedy"), std::string::npos) << "256 + 16 fits: " << message;
}

TEST(ConfigLimits, AnOverriddenLengthIsReportedAtItsSetKey) {
  LoadConfigOptions options;
  options.overrides = {"tasks.passkey.lengths=[2048]"};
  EvalConfig config = parse_eval_config(config_with("  passkey: {lengths: [64]}\n"), "cfg.yaml", options);
  try {
    check_config_for_model(config, 512);
    ADD_FAILURE() << "2048 accepted on a 512-token model";
  } catch (const kvevict::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--set tasks.passkey.lengths: error: tasks.passkey.lengths: length 2048"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigLimits, ThreadsAboveTheCoresAreRefused) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_NO_THROW(parse_eval_config(config_with("  passkey: {}\n", "threads: " + std::to_string(cores) + "\n"), "c"));
  std::string message = error_of(config_with("  passkey: {}\n", "threads: " + std::to_string(cores + 1) + "\n"));
  EXPECT_NE(message.find("cfg.yaml:2:10: error: threads: value " + std::to_string(cores + 1) + " out of range [0, " +
                         std::to_string(cores) + "]"),
            std::string::npos)
      << message;
}

TEST(ConfigLimits, NanValuesAreRefused) {
  LoadConfigOptions options;
  // YAML's NaN (.nan) parses as a number and is refused as out of range; plain "nan" is no number.
  options.overrides = {"tasks.passkey.depths=[.nan]"};
  std::string message = error_of(config_with("  passkey: {}\n"), options);
  EXPECT_NE(message.find("--set tasks.passkey.depths: error: tasks.passkey.depths: value .nan out of range"),
            std::string::npos)
      << message;
  options.overrides = {"tasks.passkey.depths=[nan]"};
  message = error_of(config_with("  passkey: {}\n"), options);
  EXPECT_NE(message.find("--set tasks.passkey.depths: error: tasks.passkey.depths: expected a number, got 'nan'"),
            std::string::npos)
      << message;
  options.overrides = {"budgets=[nan]"};
  message = error_of(config_with("  passkey: {}\n"), options);
  EXPECT_NE(message.find("--set budgets: error: budgets[0]: bad budget: 'nan'"), std::string::npos) << message;
  message = error_of(config_with("  passkey: {}\n", "seed: .nan\n"));
  EXPECT_NE(message.find("seed: expected an integer, got '.nan'"), std::string::npos) << message;
}

TEST(ConfigLimits, TheConfigFileFollowsTheFileRule) {
  TempDir dir("file");
  const std::string fifo = (dir.path / "fifo.yaml").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  try {
    load_eval_config(fifo);  // would block forever in an ifstream open before the file rule
    ADD_FAILURE() << "a FIFO was read as a config";
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(fifo + ": "), std::string::npos) << e.what();
  }
  try {
    load_eval_config(dir.path.string());
    ADD_FAILURE() << "a directory was read as a config";
  } catch (const kvevict::Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("directory"), std::string::npos) << e.what();
  }
}

TEST(ConfigLimits, LongBenchFilesThatCannotGiveSamplesAreRefusedUpFront) {
  TempDir dir("longbench");
  const std::string root = dir.path.string();
  auto config = [&](const std::string& dataset) {
    return config_with("  longbench: {path: \"" + root + "\", datasets: [" + dataset + "]}\n");
  };
  std::ofstream(dir.path / "qasper.jsonl");  // empty
  std::string message = error_of(config("qasper"));
  EXPECT_NE(message.find("cfg.yaml:3:"), std::string::npos) << message;
  EXPECT_NE(message.find(root + "/qasper.jsonl: the LongBench file is empty"), std::string::npos) << message;
  std::filesystem::create_directories(dir.path / "hotpotqa.jsonl");
  message = error_of(config("hotpotqa"));
  EXPECT_NE(message.find(root + "/hotpotqa.jsonl: "), std::string::npos) << message;
  EXPECT_NE(message.find("directory"), std::string::npos) << message;
  ASSERT_EQ(mkfifo((dir.path / "musique.jsonl").c_str(), 0600), 0);
  message = error_of(config("musique"));  // returns: the FIFO is not opened for reading
  EXPECT_NE(message.find(root + "/musique.jsonl: "), std::string::npos) << message;
  std::filesystem::remove(dir.path / "musique.jsonl");
  message = error_of(config("musique"));
  EXPECT_NE(message.find(root + "/musique.jsonl: "), std::string::npos) << message;
}

// A path the operating system refuses to look at (a name longer than NAME_MAX, as a fuzzer found) is a
// config error at its line, never a std::filesystem exception thrown through the parser.
TEST(ConfigLimits, PathsTheSystemCannotStatAreConfigErrorsNotExceptions) {
  const std::string too_long(5000, 'x');
  std::string message = error_of(config_with("  longbench: {path: \"" + too_long + "\", datasets: [qasper]}\n"));
  EXPECT_NE(message.find("cfg.yaml:3:"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  LoadConfigOptions options;
  options.check_policy = check_policy_choice;
  message = error_of("model: \"fake:\"\ntasks: {passkey: {}}\npolicies: [" + too_long + "/p.yaml]\nbudgets: [full]\n",
                     options);
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
}
