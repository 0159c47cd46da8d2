// The chunk-structured field policies (policies/field/chunkkv.yaml, chunkpress.yaml,
// noncausal_attn.yaml), loaded by name, keep exactly the positions of the independent references
// of reference_chunk_policies.cpp on stories260K: whole chunks (ChunkKV), per-chunk quotas over a
// segment-local observation window (ChunkPress), chunked non-causal attention (NonCausalAttnPress).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/decode/decoder.h"
#include "core/engine/engine.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "reference_chunk_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

using Params = std::map<std::string, std::string>;

class ChunkPolicies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!test::stories_missing_reason().empty()) return;
    model_ = load_model(test::stories_checkpoint()).release();
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
    data_ = new reference::PromptQkv(reference::record_qkv(*model_, tokens_));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete model_;
    data_ = nullptr;
    model_ = nullptr;
  }
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  static int S() { return static_cast<int>(tokens_.size()); }

  static EvictionReport prefill(const std::string& name, const Params& params, int budget) {
    return test::prefill_report(*model_, tokens_, name, params, std::to_string(budget));
  }

  // The same decision from recorded prefill signals (EvictionEngine::apply_after_prefill).
  static EvictionReport after_prefill(const std::string& name, const Params& params, int budget) {
    const auto policy = load_policy(name, params);
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    PrefillRecorder rec(S(), false);
    decoder->forward(std::span<const int>(tokens_), &rec);
    EvictionEngine engine(*policy, model_->config, {Budget::parse(std::to_string(budget)), 0});
    engine.apply_after_prefill(rec, decoder->cache());
    return engine.report();
  }

  // Kept positions equal the reference's; returns how many heads evicted something.
  static int expect_same(const EvictionReport& got, const reference::KeptSets& want, const std::string& what) {
    return test::expect_same_kept(got, want, S(), what);
  }

  static Model* model_;
  static std::vector<int> tokens_;
  static reference::PromptQkv* data_;
};

Model* ChunkPolicies::model_ = nullptr;
std::vector<int> ChunkPolicies::tokens_;
reference::PromptQkv* ChunkPolicies::data_ = nullptr;

std::string describe(const std::string& name, const Params& p, int budget) {
  std::string s = name + " budget " + std::to_string(budget);
  for (const auto& [k, v] : p) s += " " + k + "=" + v;
  return s;
}

TEST_F(ChunkPolicies, ChunkKVKeepsTheTopWholeChunksForEveryHead) {
  struct Case { int chunk, window, budget; };
  std::set<std::vector<int>> distinct_layers;  // over every case: the layers must not all agree
  for (const Case& c : {Case{20, 16, 100}, Case{20, 16, 45}, Case{7, 16, 40}, Case{20, 32, 130}}) {
    const Params p = {{"chunk", std::to_string(c.chunk)}, {"window", std::to_string(c.window)}};
    const std::string what = describe("chunkkv", p, c.budget);
    const EvictionReport r = prefill("chunkkv", p, c.budget);
    const auto want = reference::chunkkv(*data_, c.budget, c.chunk, {c.window, 5});
    EXPECT_GT(expect_same(r, want, what), 0);
    std::set<std::vector<int>> layers;
    for (const auto& layer : want) {
      layers.insert(layer[0]);
      EXPECT_EQ(layer[0].back(), S() - 1) << what << ": the chunk holding the window (max score) ranks first";
      // Whole chunks only: every kept chunk is complete (the last one as long as the prompt allows).
      std::map<int, int> per_chunk;
      for (int t : layer[0]) ++per_chunk[t / c.chunk];
      for (const auto& [k, n] : per_chunk) EXPECT_EQ(n, std::min(S(), (k + 1) * c.chunk) - k * c.chunk) << what;
      EXPECT_LE(static_cast<int>(layer[0].size()), c.budget) << what;
    }
    if (layers.size() > 1) distinct_layers.insert(layers.begin(), layers.end());
  }
  EXPECT_GT(distinct_layers.size(), 1u) << "in every case every layer kept the same chunks";
  ASSERT_NE(S() % 20, 0) << "the prompt must end in a partial chunk (kvpress's boundary chunk)";
}

TEST_F(ChunkPolicies, EntropyGatedChunkKVCutsSpikyChunksAndFillsTheBudget) {
  struct Case { int chunk, rescue, budget; };
  for (const Case& c : {Case{10, 4, 60}, Case{10, 4, 123}, Case{20, 3, 90}, Case{7, 2, 41}}) {
    const Params p = {{"chunk", std::to_string(c.chunk)}, {"rescue", std::to_string(c.rescue)}, {"window", "16"}};
    const std::string what = describe("entropy_gated_chunkkv", p, c.budget);
    const auto want = reference::entropy_gated_chunkkv(*data_, c.budget, c.chunk, c.rescue, {16, 5});
    EXPECT_GT(expect_same(prefill("entropy_gated_chunkkv", p, c.budget), want, what), 0);
    int cut = 0;  // the gate must act: some kept chunk is neither whole nor absent
    for (const auto& layer : want) {
      EXPECT_EQ(static_cast<int>(layer[0].size()), c.budget) << what << ": exactly the budget";
      std::map<int, int> per_chunk;
      for (int t : layer[0]) ++per_chunk[t / c.chunk];
      for (const auto& [k, n] : per_chunk) cut += n < std::min(S(), (k + 1) * c.chunk) - k * c.chunk;
    }
    EXPECT_GT(cut, 0) << what;
    EXPECT_NE(want, reference::chunkkv(*data_, c.budget, c.chunk, {16, 5})) << what;
  }
}

TEST_F(ChunkPolicies, ChunkPressScoresEveryChunkWithItsOwnWindowAndQuota) {
  struct Case { int chunk, window, budget; };
  for (const Case& c : {Case{64, 16, 60}, Case{100, 8, 120}, Case{37, 4, 50}}) {
    ASSERT_LT(c.chunk, S()) << "the prompt must hold several chunks";
    const Params p = {{"chunk", std::to_string(c.chunk)}, {"window", std::to_string(c.window)}};
    const std::string what = describe("chunkpress", p, c.budget);
    const auto want = reference::chunkpress(*data_, c.budget, c.chunk, {c.window, 5});
    EXPECT_GT(expect_same(prefill("chunkpress", p, c.budget), want, what), 0);
    EXPECT_GT(expect_same(after_prefill("chunkpress", p, c.budget), want, what + " (apply_after_prefill)"), 0);
  }
  // The segment-local window matters: one chunk over the whole prompt is plain SnapKV and keeps
  // another set than the per-chunk observation.
  EXPECT_NE(reference::chunkpress(*data_, 60, 64, {16, 5}), reference::chunkpress(*data_, 60, S(), {16, 5}));
}

TEST_F(ChunkPolicies, NonCausalAttnChunkedNonCausalColumnSums) {
  for (int chunk : {256, 50})
    for (int budget : {40, 100}) {
      const Params p = {{"chunk_size", std::to_string(chunk)}};
      const std::string what = describe("noncausal_attn", p, budget);
      EXPECT_GT(expect_same(prefill("noncausal_attn", p, budget), reference::noncausal_attn(*data_, budget, chunk), what), 0);
    }
  EXPECT_NE(reference::noncausal_attn(*data_, 40, 50), reference::noncausal_attn(*data_, 40, S()))
      << "the chunking must change the decision";
}

}  // namespace
}  // namespace kvevict
