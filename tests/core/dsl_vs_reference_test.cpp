// Phase-2 start: built-in policy files compiled by the DSL keep exactly the tokens of the
// independent references on stories260K, through the engine.
#include <gtest/gtest.h>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "reference_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

class DslVsReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = load_model(test::stories_checkpoint());
    tokens_ = model_->tokenizer->encode(
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day she "
        "saw a big red ball in the park. She ran to the ball and kicked it very high. The ball flew over the tree "
        "and landed in the pond. Lily was sad. Her friend Tom came and helped her get the ball out of the water.",
        true);
    data_ = reference::collect(*model_, tokens_, 16);
  }
  void compare(const std::string& name, const std::map<std::string, std::string>& params, const std::string& budget,
               const reference::KeptSets& want) {
    const auto policy = load_policy(name, params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, model_->config, {Budget::parse(budget), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    const EvictionReport& r = engine.report();
    for (size_t l = 0; l < want.size(); ++l)
      for (size_t h = 0; h < want[l].size(); ++h)
        EXPECT_EQ(r.layers[l][h].kept_positions, std::vector<int32_t>(want[l][h].begin(), want[l][h].end()))
            << name << " layer " << l << " head " << h;
  }
  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
  reference::PromptData data_;
};

TEST_F(DslVsReference, SnapKV) {
  compare("snapkv", {{"window", "16"}, {"kernel", "5"}, {"pool", "avg"}}, "40", reference::snapkv(data_, 40, {16, 5, false}));
}

TEST_F(DslVsReference, KNorm) { compare("knorm", {}, "40", reference::knorm(data_, 40)); }

TEST_F(DslVsReference, StreamingLLM) {
  compare("streamingllm", {{"sinks", "4"}, {"mode", "prefill_one_shot"}}, "40", reference::streamingllm(data_, 40, 4));
}

TEST_F(DslVsReference, H2OOneShot) {
  const int S = static_cast<int>(tokens_.size());
  compare("h2o", {{"recent_ratio", "0.1"}, {"mode", "prefill_one_shot"}, {"gqa_agg", "mean"}}, "40",
          reference::h2o_one_shot(data_, 40, S / 10));
}

TEST_F(DslVsReference, AdaKV) {
  compare("adakv", {{"window", "16"}, {"kernel", "7"}, {"floor_alpha", "0.2"}}, "40",
          reference::adakv(data_, 40, {16, 7, true}, 0.2));
}

TEST_F(DslVsReference, CakeOneShot) {
  reference::CakeParams cp;
  cp.window = 16;
  compare("cake", {{"window", "16"}}, "40", reference::cake(data_, 40, cp));
}

}  // namespace
}  // namespace kvevict
