// The eval config's `kv_type` key (docs/EVALUATION.md): default f16, written into the resolved
// config (so it enters the config hash), f32/bf16 accepted, anything else an error with file:line:col.
#include <gtest/gtest.h>

#include "core/util/error.h"
#include "evals/config.h"

using namespace kvevict::evals;

namespace {

const std::string kBase =
    "model: \"fake:\"\n"
    "tasks:\n"
    "  passkey:\n"
    "    lengths: [64]\n"
    "policies: [snapkv]\n"
    "budgets: [\"50%\"]\n";

TEST(KvTypeConfig, DefaultsToF16AndEntersTheHash) {
  const EvalConfig def = parse_eval_config(kBase, "cfg.yaml");
  EXPECT_EQ(def.kv_type, kvevict::KvType::F16);
  EXPECT_NE(def.resolved_yaml.find("kv_type: f16"), std::string::npos) << def.resolved_yaml;
  const EvalConfig f32 = parse_eval_config(kBase + "kv_type: f32\n", "cfg.yaml");
  EXPECT_EQ(f32.kv_type, kvevict::KvType::F32);
  EXPECT_NE(f32.hash, def.hash);
  EXPECT_EQ(parse_eval_config(kBase + "kv_type: bf16\n", "cfg.yaml").kv_type, kvevict::KvType::BF16);
}

TEST(KvTypeConfig, UnknownTypeIsAUsageErrorWithItsLocation) {
  try {
    parse_eval_config(kBase + "kv_type: q8\n", "cfg.yaml");
    ADD_FAILURE() << "q8 accepted";
  } catch (const kvevict::UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cfg.yaml:7:"), std::string::npos) << what;
    EXPECT_NE(what.find("kv_type"), std::string::npos) << what;
  }
}

}  // namespace

// The `weights` key beside it: native by default, f32 selectable (the reference decoder), in the hash.
TEST(WeightsConfig, DefaultsToNativeAndEntersTheHash) {
  const EvalConfig def = parse_eval_config(kBase, "cfg.yaml");
  EXPECT_EQ(def.weights, kvevict::WeightStorage::Native);
  EXPECT_NE(def.resolved_yaml.find("weights: native"), std::string::npos) << def.resolved_yaml;
  const EvalConfig f32 = parse_eval_config(kBase + "weights: f32\n", "cfg.yaml");
  EXPECT_EQ(f32.weights, kvevict::WeightStorage::F32);
  EXPECT_NE(f32.hash, def.hash);
  try {
    parse_eval_config(kBase + "weights: q4\n", "cfg.yaml");
    ADD_FAILURE() << "q4 accepted";
  } catch (const kvevict::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.yaml:7:"), std::string::npos) << e.what();
  }
}
