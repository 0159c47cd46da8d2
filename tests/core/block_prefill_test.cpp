// A prefill in blocks (run.prefill_block, core/engine/block_prefill.h) on stories260K: after every
// block, each head the engine cut must hold the reference's choice, computed in double from the keys
// the head held before the cut (KeyDiff or Knorm, the engine's tie rule: higher score, then smaller
// position), or a set that differs only by entries tied within float precision; heads within their
// budget keep everything; the peak cache stays at budget + block per head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/engine/block_prefill.h"
#include "decode_spy.h"
#include "core/util/error.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "policy_test_prompt.h"
#include "test_models.h"

namespace kvevict {
namespace {

// The rule's scores of one head in double, from its keys [T][d] as cached.
std::vector<double> reference_scores(const reference::CachedHead& head, int d, bool keydiff) {
  const int T = head.T;
  const float* k = head.keys.data();
  std::vector<double> norm(T), anchor(d, 0.0), score(T);
  for (int t = 0; t < T; ++t) {
    double s = 0;
    for (int c = 0; c < d; ++c) s += double(k[t * d + c]) * k[t * d + c];
    norm[t] = std::sqrt(s);
    for (int c = 0; c < d; ++c) anchor[c] += k[t * d + c] / std::max(norm[t], 1e-12) / T;
  }
  double anchor_norm = 0;
  for (double a : anchor) anchor_norm += a * a;
  anchor_norm = std::sqrt(anchor_norm);
  for (int t = 0; t < T; ++t) {
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += k[t * d + c] * anchor[c];
    score[t] = keydiff ? -dot / std::max(norm[t] * anchor_norm, 1e-8) : -norm[t];
  }
  return score;
}

// The positions of the `budget` best entries by the engine's tie rule (higher score, then smaller
// position), ascending.
std::vector<int32_t> reference_keep(const reference::CachedHead& head, const std::vector<double>& score, int budget) {
  std::vector<int> order(head.T);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return score[a] != score[b] ? score[a] > score[b] : head.pos[a] < head.pos[b];
  });
  std::vector<int32_t> kept;
  for (int i = 0; i < std::min(head.T, budget); ++i) kept.push_back(head.pos[order[i]]);
  std::sort(kept.begin(), kept.end());
  return kept;
}

// Whether `kept` (positions) is a top-`budget` set of `score` up to a float tie: the engine scores
// in float, the reference in double, so two entries within 1e-5 (relative) may trade places.
bool top_set_up_to_ties(const reference::CachedHead& head, const std::vector<double>& score,
                        const std::vector<int32_t>& kept) {
  double worst_kept = INFINITY, best_dropped = -INFINITY;
  for (int t = 0; t < head.T; ++t) {
    const bool in = std::binary_search(kept.begin(), kept.end(), head.pos[t]);
    (in ? worst_kept : best_dropped) = in ? std::min(worst_kept, score[t]) : std::max(best_dropped, score[t]);
  }
  return worst_kept >= best_dropped - 1e-5 * std::max(1.0, std::fabs(best_dropped));
}

class BlockPrefill : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    model_ = load_model(test::stories_checkpoint());
    tokens_ = model_->tokenizer->encode(test::kPolicyTestStory, true);
  }
  std::unique_ptr<Model> model_;
  std::vector<int> tokens_;
};

TEST_F(BlockPrefill, EveryBlocksDecisionMatchesTheReferenceAndThePeakStaysWithinBudgetPlusBlock) {
  const ModelConfig& c = model_->config;
  const int S = static_cast<int>(tokens_.size()), budget = 24;
  ASSERT_GT(S, 3 * 16) << "the prompt must span several blocks";
  int near_ties = 0, decisions = 0;
  for (const char* inner : {"keydiff", "knorm"})
    for (int block : {16, 7}) {
      const std::string what = std::string(inner) + " block " + std::to_string(block);
      const bool keydiff = std::string(inner) == "keydiff";
      const auto policy = load_policy("blockpress", {{"inner", inner}, {"block_size", std::to_string(block)}});
      auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
      EvictionEngine engine(*policy, c, {Budget::parse(std::to_string(budget)), 0});
      // The spy records every head as the block left it, before the engine cut it; the blocks are
      // fed here one by one, exactly as prefill_prompt feeds them.
      test::DecodeSpy spy(engine, c, 1);
      engine.begin_block_prefill(S);
      size_t peak = 0;
      for (int start = 0; start < S; start += block) {
        const int n = std::min(block, S - start);
        decoder->forward(std::span<const int>(tokens_).subspan(start, n), &spy);
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h) {
            const reference::CachedHead& before = spy.before(l, h);
            peak = std::max(peak, static_cast<size_t>(before.T));
            const std::vector<int32_t> got = test::held_positions(decoder->cache(), l, h);
            if (before.T <= budget) {
              EXPECT_EQ(got.size(), static_cast<size_t>(before.T)) << what << ": a head within its budget lost entries";
              continue;
            }
            ++decisions;
            const std::vector<double> score = reference_scores(before, c.head_dim, keydiff);
            const std::vector<int32_t> want = reference_keep(before, score, budget);
            if (got == want) continue;
            ++near_ties;
            EXPECT_EQ(got.size(), want.size()) << what;
            EXPECT_TRUE(top_set_up_to_ties(before, score, got)) << what << " block at " << start << " layer " << l << " head " << h;
          }
      }
      const EvictionReport& r = engine.report();
      EXPECT_EQ(r.prompt_len, S);
      EXPECT_EQ(r.applications, (S + block - 1) / block) << what << ": one application per block";
      EXPECT_EQ(peak, static_cast<size_t>(budget + block)) << what;
      EXPECT_LE(r.peak_bytes, decoder->cache().bytes_for_uniform_length(budget + block)) << what;
      EXPECT_LT(r.peak_bytes, r.bytes_full) << what << ": the blocks must bound the prefill's peak";
      // prefill_prompt is this loop: the same engine decisions give the same cache.
      auto again = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
      EvictionEngine engine2(*policy, c, {Budget::parse(std::to_string(budget)), 0});
      prefill_prompt(*again, tokens_, &engine2, &engine2);
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h)
          EXPECT_EQ(test::held_positions(again->cache(), l, h), test::held_positions(decoder->cache(), l, h)) << what;
    }
  EXPECT_GT(decisions, 100);
  EXPECT_LE(near_ties * 20, decisions) << "more than 5% of the decisions differ from the reference";
}

// Hands every call to the engine, but throws at the first layer of the call that starts at
// position `fail_at` (once), as a decoder that fails mid-prompt would.
class FailingBlockObserver : public ForwardObserver {
 public:
  FailingBlockObserver(EvictionEngine& engine, int fail_at) : engine_(engine), fail_at_(fail_at) {}
  ObservationRequest request() const override { return engine_.request(); }
  void after_layer(const LayerSignals& s, KVCache& cache) override {
    if (s.layer == 0 && s.first_position == fail_at_) {
      fail_at_ = -1;
      throw RuntimeError("planted failure in the block at " + std::to_string(s.first_position));
    }
    engine_.after_layer(s, cache);
  }
  void after_forward(int n, KVCache& cache) override { engine_.after_forward(n, cache); }

 private:
  EvictionEngine& engine_;
  int fail_at_;
};

TEST_F(BlockPrefill, APrefillCutShortBetweenBlocksIsNotTakenForTheNextPromptsStart) {
  // The engine knew the first prompt as one of S tokens in blocks of 16; the decoder failed at the
  // second block. The next prompt, shorter and in one block, must be planned for its own length.
  const ModelConfig& c = model_->config;
  const auto policy = load_policy("blockpress", {{"block_size", "16"}});
  const int S = static_cast<int>(tokens_.size());
  ASSERT_GT(S, 32);
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(*policy, c, {Budget::parse("8"), 0});
  FailingBlockObserver failing(engine, 16);
  EXPECT_THROW(prefill_prompt(*decoder, tokens_, &engine, &failing), RuntimeError);
  decoder->reset();
  const std::span<const int> second = std::span<const int>(tokens_).first(12);
  EXPECT_NO_THROW(prefill_prompt(*decoder, second, &engine, &engine));
  EXPECT_EQ(engine.report().prompt_len, 12);
  // The same cache as an engine that never saw the failed prompt.
  auto fresh_decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine fresh(*policy, c, {Budget::parse("8"), 0});
  prefill_prompt(*fresh_decoder, second, &fresh, &fresh);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h)
      EXPECT_EQ(test::held_positions(decoder->cache(), l, h), test::held_positions(fresh_decoder->cache(), l, h));
}

TEST_F(BlockPrefill, APromptWithinOneBlockIsOneForwardAndBadCombinationsAreRefused) {
  const ModelConfig& c = model_->config;
  const auto policy = load_policy("blockpress", {{"block_size", "100000"}});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1});
  EvictionEngine engine(*policy, c, {Budget::parse("24"), 0});
  prefill_prompt(*decoder, tokens_, &engine, &engine);
  EXPECT_EQ(engine.report().applications, 1);
  EXPECT_EQ(decoder->cache().length(0, 0), 24);
  // Chunk rules and A_seg decide once on the whole prompt: refused with a prefill in blocks.
  const std::string head = "name: p\nabout: x\nscore: |\n  score[t] = pos[t]\nrun: {prefill_block: 16}\n";
  for (const std::string& extra : {std::string("select: {unit: chunk, chunk: 4}\n"),
                                   std::string("observe: {window: 4, segment: 32}\n"),
                                   std::string("select: {unfold_gqa: true}\n")}) {
    try {
      dsl::compile_policy_text("p.yaml", head + extra);
      ADD_FAILURE() << "accepted: " << extra;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("p.yaml:5:22: error:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("prefill_block"), std::string::npos) << e.what();
    }
  }
  try {
    load_policy("blockpress", {{"block_size", "0"}});
    FAIL() << "block_size 0 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("block_size"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvevict
