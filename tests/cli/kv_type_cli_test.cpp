// `--kv-type` on inspect and generate: the reported cache bytes follow the element type (stories260K
// head_dim 8: 2*8*2+4 = 36 bytes per entry in f16, 2*8*4+4 = 68 in f32), and a bad name exits 2.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "cli_run.h"

#include "../core/policy_test_prompt.h"
#include "../core/test_models.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

class KvTypeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
    prompt_ = ::testing::TempDir() + "/kvevict_kv_type_prompt_" + std::to_string(::getpid()) + ".txt";
    std::ofstream(prompt_) << kvevict::test::kPolicyTestStory;
  }
  nlohmann::json inspect(const std::string& extra) {
    const CliRun r = run_kvevict("inspect -m " + model_ + " --prompt-file " + prompt_ + " --policy knorm --budget 40 --json" + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  }
  std::string model_, prompt_;
};

TEST_F(KvTypeCli, InspectBytesFollowTheType) {
  const auto f16 = inspect("");  // the default
  const auto f32 = inspect(" --kv-type f32");
  const auto bf16 = inspect(" --kv-type bf16");
  const double S = f16["prompt_tokens"];
  const double heads = 5 * 4;  // layers x KV heads
  EXPECT_EQ(f16["bytes_full"].get<double>(), S * heads * 36);
  EXPECT_EQ(bf16["bytes_full"].get<double>(), S * heads * 36);
  EXPECT_EQ(f32["bytes_full"].get<double>(), S * heads * 68);
  EXPECT_EQ(f16["bytes_kept"].get<double>(), 40 * heads * 36);
}

TEST_F(KvTypeCli, GenerateAcceptsEveryTypeAndRefusesOthers) {
  for (const char* type : {"f16", "bf16", "f32"}) {
    const CliRun r = run_kvevict("generate -m " + model_ + " -p \"Once upon a time\" -n 8 --device cpu --kv-type " + type);
    EXPECT_EQ(r.exit_code, 0) << type << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << type;
  }
  const CliRun bad = run_kvevict("generate -m " + model_ + " -p hi -n 1 --device cpu --kv-type fp8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("kv-type"), std::string::npos) << bad.err;
}

}  // namespace
