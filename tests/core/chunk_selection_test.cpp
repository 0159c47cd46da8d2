// The chunk rules of core/engine/chunk_selection.h on hand-built scores: whole chunks (ties, the
// shorter last chunk, the fitting-prefix rule, the aggregation), per-chunk quotas (rounding), the
// protected entries, random cases against the integer re-derivation of
// reference_chunk_policies.cpp, and the engine's check of hand-built descriptions.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/engine/chunk_selection.h"
#include "core/engine/engine.h"
#include "core/util/error.h"
#include "hand_policies.h"
#include "reference_chunk_policies.h"

namespace kvevict {
namespace {

std::vector<int32_t> iota_positions(int n) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

std::vector<int> whole(const std::vector<float>& s, int chunk, int budget, ChunkScore how = ChunkScore::Mean,
                       int first = 0, int recent = 0) {
  const auto pos = iota_positions(static_cast<int>(s.size()));
  return select_whole_chunks(s, pos, {budget, first, recent, chunk, how});
}

std::vector<int> quota(const std::vector<float>& s, int chunk, int budget, int first = 0, int recent = 0) {
  const auto pos = iota_positions(static_cast<int>(s.size()));
  return select_per_chunk(s, pos, {budget, first, recent, chunk, ChunkScore::Mean});
}

TEST(ChunkSelection, WholeChunksByMeanScoreTiesToTheEarlierChunk) {
  //                    chunk 0     | chunk 1     | chunk 2
  const std::vector<float> s = {1, 1, 1, 5, 5, 5, 1, 1, 1};
  EXPECT_EQ(whole(s, 3, 3), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(whole(s, 3, 6), (std::vector<int>{0, 1, 2, 3, 4, 5})) << "chunks 0 and 2 tie: the earlier first";
  EXPECT_EQ(whole(s, 3, 5), (std::vector<int>{3, 4, 5})) << "whole chunks only: 5 keeps one chunk of 3";
  EXPECT_EQ(whole(s, 3, 2), (std::vector<int>{})) << "no chunk fits";
  EXPECT_EQ(whole(s, 3, 9), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(ChunkSelection, TheShorterLastChunkIsScoredOverItsOwnEntries) {
  // chunks of 4: [0..3] mean 2, [4..7] mean 1, [8..9] mean 3 (sum 6, less than chunk 0's 8).
  const std::vector<float> s = {2, 2, 2, 2, 1, 1, 1, 1, 3, 3};
  EXPECT_EQ(whole(s, 4, 2), (std::vector<int>{8, 9}));
  EXPECT_EQ(whole(s, 4, 6), (std::vector<int>{0, 1, 2, 3, 8, 9}));
  EXPECT_EQ(whole(s, 4, 4, ChunkScore::Sum), (std::vector<int>{0, 1, 2, 3})) << "by sum chunk 0 ranks first";
  // The fitting prefix: by sum the ranking is chunk 0 (8), chunk 2 (6), chunk 1 (4); a budget of 5
  // keeps chunk 0 and stops at chunk 2, which does not fit the 1 left.
  EXPECT_EQ(whole(s, 4, 5, ChunkScore::Sum), (std::vector<int>{0, 1, 2, 3}));
  // The prefix stops at the first chunk that does not fit, even if a later, shorter one would.
  const std::vector<float> t = {3, 3, 3, 3, 2, 2, 2, 2, 1, 1};
  EXPECT_EQ(whole(t, 4, 7), (std::vector<int>{0, 1, 2, 3}));
}

TEST(ChunkSelection, MaxAggregationAndNaNChunksRankLast) {
  const std::vector<float> s = {0, 9, 0, 4, 4, 4, NAN, 1, 1};
  EXPECT_EQ(whole(s, 3, 3, ChunkScore::Max), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(whole(s, 3, 3, ChunkScore::Mean), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(whole(s, 3, 6, ChunkScore::Mean), (std::vector<int>{0, 1, 2, 3, 4, 5})) << "the NaN chunk is -inf";
}

TEST(ChunkSelection, ProtectedEntriesAreKeptFirstAndLeaveTheirChunksCheaper) {
  const std::vector<float> s = {0, 0, 0, 5, 5, 5, 1, 1, 1};
  // Sink 0 is kept; chunk 0's candidates are 1, 2 (cost 2). Budget 6: sink + chunk 1 (3); chunk
  // 2 ranks next and does not fit the 2 left, so the prefix ends there (chunk 0 would fit).
  EXPECT_EQ(whole(s, 3, 6, ChunkScore::Mean, 1), (std::vector<int>{0, 3, 4, 5}));
  EXPECT_EQ(whole(s, 3, 7, ChunkScore::Mean, 1), (std::vector<int>{0, 3, 4, 5, 6, 7, 8}));
  // Protected entries filling the budget are kept alone by their priority (selection.h).
  EXPECT_EQ(whole(s, 3, 2, ChunkScore::Mean, 1, 2), (std::vector<int>{0, 8}));
  // Recent 8 kept; 2 left over 8 candidates in chunks of 3, 3, 2: quotas 1, 1, 0.
  EXPECT_EQ(quota(s, 3, 3, 0, 1), (std::vector<int>{0, 3, 8}));
}

TEST(ChunkSelection, PerChunkQuotasAddUpToTheBudgetByLargestRemainder) {
  // 10 entries, chunks of 3: lengths 3, 3, 3, 1. Budget 4: shares 1.2, 1.2, 1.2, 0.4 -> floors 1,
  // 1, 1, 0 and the remaining one to the largest remainder (0.4, the last chunk).
  const std::vector<float> s = {1, 3, 2, 3, 1, 2, 2, 2, 9, 0};
  EXPECT_EQ(quota(s, 3, 4), (std::vector<int>{1, 3, 8, 9}));
  // Budget 5: shares 1.5, 1.5, 1.5, 0.5: two extra, ties to the lower chunks.
  EXPECT_EQ(quota(s, 3, 5), (std::vector<int>{1, 2, 3, 5, 8}));
  // Budget 8: shares 2.4, 2.4, 2.4, 0.8 -> quotas 3, 2, 2, 1. Inside a chunk the token rule: chunk
  // 2 holds 2, 2, 9, and its tie goes to the smaller position 6.
  EXPECT_EQ(quota(s, 3, 8), (std::vector<int>{0, 1, 2, 3, 5, 6, 8, 9}));
  EXPECT_EQ(quota(s, 3, 10).size(), 10u);
}

TEST(ChunkSelection, MatchTheReferenceRulesOnRandomCases) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40), chunk = 1 + static_cast<int>(rng() % 12);
    const int budget = static_cast<int>(rng() % (n + 3));
    std::vector<float> s(n);
    std::vector<double> d(n);
    for (int i = 0; i < n; ++i) d[i] = s[i] = static_cast<float>(rng() % 5);  // many ties
    const std::string what = "n=" + std::to_string(n) + " chunk=" + std::to_string(chunk) + " budget=" + std::to_string(budget);
    for (int how = 0; how < 3; ++how)
      EXPECT_EQ(whole(s, chunk, budget, static_cast<ChunkScore>(how)), reference::whole_chunks_keep(d, chunk, budget, how))
          << what << " how=" << how;
    EXPECT_EQ(quota(s, chunk, budget), reference::per_chunk_keep(d, chunk, budget)) << what;
    EXPECT_EQ(static_cast<int>(quota(s, chunk, budget).size()), std::min(budget, n)) << what;
  }
}

TEST(ChunkSelection, ScoreOrderListsChunksByRankThenTheProtectedEntries) {
  const std::vector<float> s = {0, 0, 0, 5, 5, 5, 1, 1, 1, 3, 3};
  const auto pos = iota_positions(static_cast<int>(s.size()));
  // Sink 0; chunks 1 (5), 3 (3, the short one), 2 (1) by rank; budget 1 + 3 + 2 + 3.
  EXPECT_EQ(select_whole_chunks(s, pos, {9, 1, 0, 3, ChunkScore::Mean, true}),
            (std::vector<int>{3, 4, 5, 9, 10, 6, 7, 8, 0}));
  // Per chunk, budget 5 over 11 entries (3, 3, 3, 2): quotas 2, 1, 1, 1, then listed by token rank.
  EXPECT_EQ(select_per_chunk(s, pos, {5, 0, 0, 3, ChunkScore::Mean, true}), (std::vector<int>{3, 9, 6, 0, 1}));
}

std::vector<int> gated(const std::vector<float>& s, int chunk, int budget, int rescue, int first = 0) {
  const auto pos = iota_positions(static_cast<int>(s.size()));
  return select_entropy_gated(s, pos, {budget, first, 0, chunk, ChunkScore::Mean, false, rescue});
}

TEST(ChunkSelection, EntropyGateCutsHighSpikyChunksToTheirRescueTokens) {
  // Chunks of 4: c0 spiky and high (one 8), c1 flat and high (3s), c2 flat low (1s), c3 flat low.
  // Means 2, 3, 1, 0.5: median (lower middle of 0.5, 1, 2, 3) = 1, so c0, c1 and c2 are high;
  // entropies: c0 0 (one non-zero entry), the others 1: median 1, so c0 alone is spiky.
  const std::vector<float> s = {0, 8, 0, 0, 3, 3, 3, 3, 1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f};
  // Budget 6: c1 whole (4), c0 cut to rescue 1 (its 8), then c2 gets the 1 left (the earliest).
  EXPECT_EQ(gated(s, 4, 6, 1), (std::vector<int>{1, 4, 5, 6, 7, 8}));
  // Budget 9: c1 (4), c0 (2: the 8 and the earliest 0), c2 (3 of 4).
  EXPECT_EQ(gated(s, 4, 9, 2), (std::vector<int>{0, 1, 4, 5, 6, 7, 8, 9, 10}));
  // Budget 15, rescue 1: c1 4, c0 1, c2 4, c3 4 = 13, then the top-up: c0's best remaining (0, 2).
  EXPECT_EQ(gated(s, 4, 15, 1), (std::vector<int>{0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_THROW(gated(s, 4, 6, 0), std::invalid_argument);
}

TEST(ChunkSelection, EntropyGateMatchesTheReferenceOnRandomCases) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 50), chunk = 2 + static_cast<int>(rng() % 10);
    const int rescue = 1 + static_cast<int>(rng() % (chunk - 1)), budget = static_cast<int>(rng() % (n + 3));
    std::vector<float> s(n);
    std::vector<double> d(n);
    for (int i = 0; i < n; ++i) d[i] = s[i] = static_cast<float>(rng() % 7) - (trial % 3 == 0 ? 3.0f : 0.0f);
    EXPECT_EQ(gated(s, chunk, budget, rescue), reference::entropy_gated_keep(d, chunk, budget, rescue))
        << "n=" << n << " chunk=" << chunk << " rescue=" << rescue << " budget=" << budget << " scores " << [&] { std::string o; for (float v : s) o += std::to_string(static_cast<int>(v)) + ","; return o; }();
  }
}

TEST(ChunkSelection, PositionsNotInCacheOrder) {
  // Entries in any cache order: chunks are by original position, the result by position.
  const std::vector<float> s = {5, 1, 5, 1};
  const std::vector<int32_t> pos = {3, 0, 2, 1};  // chunk 0 = positions 0, 1 (indices 1, 3)
  EXPECT_EQ(select_whole_chunks(s, pos, {2, 0, 0, 2, ChunkScore::Mean}), (std::vector<int>{2, 0}));
  EXPECT_THROW(select_whole_chunks(s, pos, {2, 0, 0, 0, ChunkScore::Mean}), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict

namespace kvevict {
namespace {

// A hand-built description (no policy file) meets the same list (core/engine/segment_checks.h)
// when an engine is built: the first unsupported combination is a UsageError naming the policy.
TEST(ChunkSelection, TheEngineRejectsHandBuiltCombinationsItCannotRun) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.context_length = 64;
  auto expect_rejected = [&](const PolicyDescription& d, const std::string& message) {
    test::HandPolicy p;
    p.desc = d;
    p.score_fn = [](const ScoreInputs& in, bool, float* out) { std::fill(out, out + in.T, 0.0f); };
    try {
      EvictionEngine e(p, c, {Budget::parse("8"), 0});
      ADD_FAILURE() << "accepted: " << message;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("policy hand: " + message), std::string::npos) << e.what();
    }
  };
  PolicyDescription d;
  d.name = "hand";
  d.select.unit = SelectUnit::Chunk;
  expect_rejected(d, "'unit: chunk' needs 'chunk: EXPR'");
  d.select.chunk = 4;
  d.run.cascading = true;
  expect_rejected(d, "'unit: chunk' selects once at prefill on the prompt's chunks; it cannot be combined with cascading");
  d = PolicyDescription{};
  d.name = "hand";
  d.reads[signal_index(TensorSignal::SegmentAttention)] = true;
  expect_rejected(d, "the policy reads A_seg (segment-local attention), but 'observe' has no 'segment: EXPR'");
  d.observe.segment = 16;
  expect_rejected(d, "'segment' needs 'window: EXPR'");
  d.window = 4;
  test::HandPolicy ok;
  ok.desc = d;
  ok.score_fn = [](const ScoreInputs& in, bool, float* out) { std::fill(out, out + in.T, 0.0f); };
  EXPECT_NO_THROW((EvictionEngine(ok, c, EngineOptions{Budget::parse("8"), 0})));
}

}  // namespace
}  // namespace kvevict
