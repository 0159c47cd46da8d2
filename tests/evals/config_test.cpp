// Config validation: every error is reported with file:line:col (or the --set key) before any work.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "evals/config.h"

using namespace kvevict::evals;

namespace {

const char* kGood =
    "name: t\n"
    "model: \"fake:\"\n"
    "seed: 3\n"
    "tasks:\n"
    "  passkey:\n"
    "    lengths: [64, 128]\n"
    "policies: [streaming_llm, {policy: snapkv, params: {window: 8}}]\n"
    "budgets: [\"10%\", \"128\", full]\n";

std::string error_of(const std::string& yaml, const LoadConfigOptions& options = {}) {
  try {
    parse_eval_config(yaml, "cfg.yaml", options);
  } catch (const kvevict::UsageError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

}  // namespace

TEST(Config, GoodConfigResolves) {
  EvalConfig config = parse_eval_config(kGood, "cfg.yaml");
  EXPECT_EQ(config.name, "t");
  EXPECT_EQ(config.seed, 3u);
  ASSERT_EQ(config.tasks.size(), 1u);
  ASSERT_EQ(config.policies.size(), 2u);
  EXPECT_EQ(config.policies[1].label, "snapkv(window=8)");
  ASSERT_EQ(config.budgets.size(), 3u);
  EXPECT_EQ(config.budgets[0].kind, kvevict::Budget::Kind::Fraction);
  EXPECT_DOUBLE_EQ(config.budgets[0].value, 0.1);
  EXPECT_EQ(config.budgets[1].kind, kvevict::Budget::Kind::TokensPerHead);
  EXPECT_EQ(config.budgets[2].kind, kvevict::Budget::Kind::Full);
  // Defaults are written into the resolved config.
  EXPECT_NE(config.resolved_yaml.find("samples: 4"), std::string::npos) << config.resolved_yaml;
  EXPECT_NE(config.resolved_yaml.find("question: agnostic"), std::string::npos);
  EXPECT_EQ(config.hash.size(), 64u);
}

TEST(Config, HashFollowsTheResolvedValues) {
  EvalConfig a = parse_eval_config(kGood, "a.yaml");
  EvalConfig b = parse_eval_config(std::string(kGood) + "# a comment changes nothing\n", "a.yaml");
  EXPECT_EQ(a.hash, b.hash);
  LoadConfigOptions options;
  options.overrides = {"seed=4"};
  EXPECT_NE(parse_eval_config(kGood, "a.yaml", options).hash, a.hash);
}

TEST(Config, UnknownKeyNamesFileLineAndColumn) {
  std::string message = error_of(std::string(kGood) + "tsks: 1\n");
  EXPECT_NE(message.find("cfg.yaml:9:1: error: tsks: unknown key 'tsks'"), std::string::npos) << message;
  message = error_of("name: t\nmodel: \"fake:\"\ntasks:\n  passkey:\n    lenghts: [64]\npolicies: [a]\nbudgets: [full]\n");
  EXPECT_NE(message.find("error: tasks.passkey.lenghts: unknown key 'lenghts'"), std::string::npos) << message;
}

TEST(Config, WrongTypeIsReported) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("seed: 3"), 7, "seed: abc");
  std::string message = error_of(yaml);
  EXPECT_NE(message.find("cfg.yaml:3:7: error: seed: expected an integer, got 'abc'"), std::string::npos) << message;
}

TEST(Config, BadBudgetIsReported) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("\"128\""), 5, "\"150%\"");
  std::string message = error_of(yaml);
  EXPECT_NE(message.find("cfg.yaml:8:18: error: budgets[1]: bad budget: '150%'"), std::string::npos) << message;
  yaml = kGood;
  yaml.replace(yaml.find("\"128\""), 5, "\"-3\"");
  EXPECT_NE(error_of(yaml).find("bad budget: '-3'"), std::string::npos);
  yaml = kGood;
  yaml.replace(yaml.find("\"128\""), 5, "lots");
  EXPECT_NE(error_of(yaml).find("bad budget: 'lots'"), std::string::npos);
}

TEST(Config, MissingModelIsReported) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("\"fake:\""), 7, "/no/such/model.gguf");
  std::string message = error_of(yaml);
  EXPECT_NE(message.find("cfg.yaml:2:8: error: model: model file '/no/such/model.gguf' does not exist"),
            std::string::npos)
      << message;
  yaml = kGood;
  yaml.replace(yaml.find("model: \"fake:\"\n"), 15, "");
  EXPECT_NE(error_of(yaml).find("model: missing required key"), std::string::npos);
}

TEST(Config, ImpossibleValuesAndAllErrorsAtOnce) {
  const char* yaml =
      "model: \"fake:\"\n"
      "device: tpu\n"
      "tasks:\n"
      "  needle: {lengths: [64], depths: [50, 120]}\n"
      "  quiz: {}\n"
      "policies: []\n"
      "budgets: [\"0%\"]\n";
  std::string message = error_of(yaml);
  EXPECT_NE(message.find("cfg.yaml:2:9: error: device: 'tpu' is not one of auto|cpu|cuda"), std::string::npos) << message;
  EXPECT_NE(message.find("tasks.needle.depths: value 120 out of range [0, 100]"), std::string::npos) << message;
  EXPECT_NE(message.find("cfg.yaml:5:3: error: tasks.quiz: unknown task type 'quiz'"), std::string::npos) << message;
  EXPECT_NE(message.find("policies: the list is empty"), std::string::npos) << message;
  EXPECT_NE(message.find("bad budget: '0%'"), std::string::npos) << message;
}

TEST(Config, OverridesReplaceAnyKeyAndAreBlamedByName) {
  LoadConfigOptions options;
  options.overrides = {"tasks.passkey.lengths=[1024]", "budgets=[full]", "tasks.needle.depths=[10]"};
  EvalConfig config = parse_eval_config(kGood, "cfg.yaml", options);
  EXPECT_NE(config.resolved_yaml.find("lengths: [1024]"), std::string::npos) << config.resolved_yaml;
  ASSERT_EQ(config.budgets.size(), 1u);
  EXPECT_EQ(config.tasks.size(), 2u);  // the override created the needle task

  options.overrides = {"tasks.passkey.lengths=[abc]"};
  std::string message = error_of(kGood, options);
  EXPECT_NE(message.find("--set tasks.passkey.lengths: error: tasks.passkey.lengths: expected an integer"),
            std::string::npos)
      << message;
  options.overrides = {"seed"};
  EXPECT_NE(error_of(kGood, options).find("expected key.path=value"), std::string::npos);
  options.overrides = {"name.first=x"};
  EXPECT_NE(error_of(kGood, options).find("'name' is not a mapping"), std::string::npos);
}

TEST(Config, PolicyCheckerErrorsAreLocated) {
  LoadConfigOptions options;
  options.check_policy = [](const std::string&, const PolicyChoice& choice) {
    if (choice.policy == "snapkv") throw kvevict::UsageError("unknown policy 'snapkv'");
  };
  std::string message = error_of(kGood, options);
  EXPECT_NE(message.find("cfg.yaml:7:27: error: policies[1]: unknown policy 'snapkv'"), std::string::npos) << message;
}

TEST(Config, SyntaxErrorHasLocation) {
  std::string message = error_of("model: [unclosed\n");
  EXPECT_NE(message.find("cfg.yaml:"), std::string::npos);
  EXPECT_NE(message.find("error:"), std::string::npos);
}

TEST(Config, ExpandPath) {
  setenv("KVEVICT_TEST_DIR", "/opt/m", 1);
  unsetenv("KVEVICT_TEST_UNSET");
  EXPECT_EQ(expand_path("${KVEVICT_TEST_DIR}/a.gguf"), "/opt/m/a.gguf");
  EXPECT_EQ(expand_path("$KVEVICT_TEST_DIR/a"), "/opt/m/a");
  EXPECT_EQ(expand_path("${KVEVICT_TEST_UNSET:-/d}/a"), "/d/a");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(expand_path("~/x"), "/home/u/x");
}
