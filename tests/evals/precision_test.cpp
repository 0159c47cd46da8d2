// The `precision` key of an eval config: the worst-case 95% half-width against hand-computed values,
// the sample count it needs, and the refusal (exit 2 at the key's file:line:col, before anything is
// run or written) of a config whose samples cannot reach it.
#include <gtest/gtest.h>

#include <cmath>

#include "core/util/error.h"
#include "evals/config.h"
#include "evals/fake_runner.h"
#include "evals/precision.h"
#include "evals/runner.h"
#include "temp_db.h"

using namespace kvevict::evals;
using kvevict::evals::test::TempDb;

namespace {

std::string config_with(const std::string& precision, int passkey_samples, int kvr_samples) {
  return "model: \"fake:\"\nseed: 3\ntasks:\n  passkey: {lengths: [64], depths: [50], samples: " +
         std::to_string(passkey_samples) + "}\n  kv_retrieval: {lengths: [64], depths: [50], samples: " +
         std::to_string(kvr_samples) + "}\npolicies: [a]\nbudgets: [full]\n" + precision;
}

std::string plan_error(const std::string& yaml) {
  EvalConfig config = parse_eval_config(yaml, "cfg.yaml");
  FakeRunner runner("fake:");
  try {
    plan_samples(config, runner);
  } catch (const kvevict::UsageError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "planned without complaint:\n" << yaml;
  return "";
}

}  // namespace

TEST(Precision, WorstCaseHalfWidthIsTheMaximumVarianceNormalBound) {
  // 1.959964 * 50 / sqrt(n), computed by hand.
  EXPECT_NEAR(worst_case_half_width(1), 97.9982, 1e-3);
  EXPECT_NEAR(worst_case_half_width(25), 19.5996, 1e-3);
  EXPECT_NEAR(worst_case_half_width(100), 9.79982, 1e-4);
  // (1.959964 * 50 / 10)^2 = 96.04 -> 97 samples for +/-10; (98.0 / 20)^2 = 24.01 -> 25 for +/-20.
  EXPECT_EQ(samples_for_half_width(10), 97);
  EXPECT_EQ(samples_for_half_width(20), 25);
  EXPECT_EQ(samples_for_half_width(98), 1);
  // The bound holds for 0/1 scores: Wilson's half-width at p = 0.5 is z / (2 sqrt(n + z^2)) (x 100).
  for (int n : {5, 40, 97}) {
    const double z = 1.959963984540054;
    EXPECT_LT(100 * z / (2 * std::sqrt(n + z * z)), worst_case_half_width(n)) << n;
    EXPECT_LE(worst_case_half_width(samples_for_half_width(10)), 10.0);
  }
}

TEST(Precision, TooFewSamplesPerTaskAreRefusedAtTheWidth) {
  std::string error = plan_error(config_with("precision: {half_width: 20}\n", 30, 24));
  EXPECT_NE(error.find("cfg.yaml:8:25: error: precision: task 'kv_retrieval' has 24 samples"), std::string::npos)
      << error;
  EXPECT_NE(error.find("+/-20.0 needs at least 25"), std::string::npos) << error;
  EvalConfig enough = parse_eval_config(config_with("precision: {half_width: 20}\n", 30, 25), "cfg.yaml");
  FakeRunner runner("fake:");
  EXPECT_EQ(plan_samples(enough, runner).size(), 55u);
}

TEST(Precision, TheSuiteScopePoolsEveryTask) {
  // 13 + 12 = 25 pooled samples reach +/-20; 12 + 12 = 24 do not.
  EvalConfig pooled = parse_eval_config(config_with("precision: {half_width: 20, over: suite}\n", 13, 12), "cfg.yaml");
  FakeRunner runner("fake:");
  EXPECT_EQ(plan_samples(pooled, runner).size(), 25u);
  std::string error = plan_error(config_with("precision: {half_width: 20, over: suite}\n", 12, 12));
  EXPECT_NE(error.find("the suite (every task pooled) has 24 samples"), std::string::npos) << error;
}

TEST(Precision, AWidthFromSetIsNamedAsSuch) {
  LoadConfigOptions options;
  options.overrides = {"precision.half_width=5"};
  EvalConfig config = parse_eval_config(config_with("precision: {half_width: 20}\n", 30, 30), "cfg.yaml", options);
  FakeRunner runner("fake:");
  try {
    plan_samples(config, runner);
    ADD_FAILURE() << "planned 60 samples against +/-5";
  } catch (const kvevict::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--set precision.half_width: error: precision: task"), std::string::npos)
        << e.what();
  }
}

TEST(Precision, ARefusedConfigWritesNothing) {
  TempDb db("precision_refused");
  EvalConfig config = parse_eval_config(config_with("precision: {half_width: 5}\n", 4, 4), "cfg.yaml");
  FakeRunner runner("fake:");
  {
    ResultsStore store(db.path);
    EXPECT_THROW(run_eval(config, runner, store, {}), kvevict::UsageError);
  }
  ResultsStore store(db.path);
  EXPECT_TRUE(store.runs().empty());
}

TEST(Precision, BadValuesAreConfigErrors) {
  auto error_of = [](const std::string& precision) -> std::string {
    try {
      parse_eval_config(config_with(precision, 1, 1), "cfg.yaml");
    } catch (const kvevict::UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("precision: {half_width: 0}\n").find("cfg.yaml:8:"), std::string::npos);
  EXPECT_NE(error_of("precision: {half_width: 10, over: cell}\n").find("over"), std::string::npos);
  EXPECT_NE(error_of("precision: {over: task}\n").find("precision.half_width"), std::string::npos);
  EXPECT_NE(error_of("precision: {half_width: 10, width: 3}\n").find("width"), std::string::npos);
  EXPECT_NE(error_of("precision: 10\n").find("precision"), std::string::npos);
}
