// `generate --prefill-attention`: own is accepted on any device (the CPU decoder has one attention),
// flashinfer is the CUDA decoder's and is refused elsewhere (exit 2, never silently ignored), and an
// unknown kernel name exits 2. The FlashInfer run itself is a GPU test
// (tests/core/flashinfer_prefill_test.cpp).
#include <gtest/gtest.h>

#include "cli_run.h"
#include "core/decode/make_decoder.h"

#include "../core/test_models.h"

namespace {

using kvevict::test::CliRun;
using kvevict::test::run_kvevict;

class PrefillAttentionCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = kvevict::test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = kvevict::test::stories_checkpoint();
  }
  std::string model_;
};

TEST_F(PrefillAttentionCli, FlashInferIsTheCudaDecodersAndUnknownNamesAreRefused) {
  const CliRun own = run_kvevict("generate -m " + model_ + " -p \"Once upon a time\" -n 4 --device cpu --prefill-attention own");
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_FALSE(own.out.empty());
  const CliRun flash = run_kvevict("generate -m " + model_ + " -p hi -n 1 --device cpu --prefill-attention flashinfer");
  EXPECT_EQ(flash.exit_code, 2);
  EXPECT_NE(flash.err.find("--device cuda"), std::string::npos) << flash.err;
  const CliRun bad = run_kvevict("generate -m " + model_ + " -p hi -n 1 --device cpu --prefill-attention flash");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("prefill-attention"), std::string::npos) << bad.err;
}

// `kvevict version` says which of the build's optional parts it holds, as the build really has them
// (a bug report then says whether a slow GPU prefill lacked FlashInfer).
TEST(VersionCli, NamesTheOptionalPartsThisBuildHas) {
  const CliRun v = run_kvevict("version");
  ASSERT_EQ(v.exit_code, 0) << v.err;
  const bool cuda = kvevict::cuda_decoder_built();
  EXPECT_NE(v.out.find(cuda ? "CUDA support: built" : "CUDA support: not built"), std::string::npos) << v.out;
  if (cuda) {
    const char* want = kvevict::flashinfer_prefill_built() ? "FlashInfer prefill: built" : "FlashInfer prefill: not built";
    EXPECT_NE(v.out.find(want), std::string::npos) << v.out;
  } else {
    EXPECT_EQ(v.out.find("FlashInfer"), std::string::npos) << v.out;
  }
}

}  // namespace
