// Spec §8 `nacl.seed`: `kvevict inspect --seed N` reaches NACL's sampler (the random share of the
// budget): the same seed repeats the kept sets, another seed changes them. (The eval path, the
// config's `seed:`, is checked in tests/core/nacl_options_test.cpp.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"
#include "cli_run.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

TEST(NaclSeedCli, InspectSeedReachesTheSampler) {
  if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::string prompt = ::testing::TempDir() + "/kvevict_nacl_seed_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(prompt) << kvevict::test::kPolicyTestStory;
  auto kept = [&](int seed) {
    const CliRun r = run_kvevict("inspect -m " + kvevict::test::stories_checkpoint() + " --prompt-file " + prompt +
                                 " --policy nacl --budget 40 --set budget_split=explicit --set explicit_sinks=4"
                                 " --set explicit_protect=0.05 --set explicit_proxy=0.06 --json --seed " +
                                 std::to_string(seed));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out)["layers"];
  };
  const auto a = kept(1);
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(a, kept(1));
  EXPECT_NE(a, kept(2));
  std::remove(prompt.c_str());
}

}  // namespace
