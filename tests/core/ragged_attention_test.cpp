// The ragged attention kernels' CPU twin (core/decode/ragged_attention_twin.h), which runs the
// kernels' own tile, split and merge phases, against an independent double-precision reference
// (ragged_attention_test_layer.h) and the decoder's block_attention, and the planner's choices and
// refusals.
//
// Tolerance. The twin computes in f32 (unit roundoff u = 2^-24 ~ 6e-8) what the reference
// computes in double over the same rounded K/V. Scores are dots of head_dim <= 128 products of
// N(0,1) factors scaled by 1/sqrt(head_dim): |score| stays below ~6 and its f32 error below
// ~head_dim * u * |score| ~ 5e-5 in the worst case (random signs give ~1e-6). exp turns an
// absolute score error into the same relative weight error, and the output is a convex
// combination of values with |v| < ~5, so an output error ~ 5 * 5e-5 would be the worst case; the
// online rescaling and the merge add a few u per tile / chunk. Observed errors are ~1e-6; the
// bound 2e-4 * (1 + |ref|) keeps a 4x margin over the worst case while staying far below any
// real mistake (a dropped tile or chunk, a wrong mask, a wrong head: errors of 1e-2 or more).
// Column sums are sums of at most n probabilities and get the same relative bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "core/decode/block_attention.h"
#include "core/decode/kv_cache.h"
#include "core/decode/ragged_attention_twin.h"
#include "core/model/model_config.h"
#include "core/util/error.h"
#include "ragged_attention_test_layer.h"

namespace kvevict {
namespace {

using ragged_test::Layer;
using ragged_test::Reference;

constexpr double kTol = 2e-4;

double close_error(double got, double want) { return std::abs(got - want) / (1.0 + std::abs(want)); }

void expect_attention(const RaggedAttentionOutput& got, const Reference& ref, const std::string& where) {
  ASSERT_EQ(got.out.size(), ref.out.size()) << where;
  double worst = 0;
  size_t at = 0;
  for (size_t e = 0; e < ref.out.size(); ++e) {
    const double err = std::isfinite(got.out[e]) ? close_error(got.out[e], ref.out[e]) : INFINITY;
    if (err > worst) worst = err, at = e;
  }
  EXPECT_LE(worst, kTol) << where << ": output element " << at << " got " << got.out[at] << " want " << ref.out[at];
  for (size_t r = 0; r < ref.row_max.size(); ++r) {
    if (ref.row_max[r] == -INFINITY) {
      EXPECT_EQ(got.row_max[r], -INFINITY) << where << " row " << r;
      EXPECT_EQ(got.row_sum[r], 0.0f) << where << " row " << r;
      continue;
    }
    // The statistics are relative to the max, so compare exp(max) * sum (the softmax denominator).
    const double denom = std::exp(double(got.row_max[r]) - ref.row_max[r]) * got.row_sum[r];
    EXPECT_LE(close_error(denom / ref.row_sum[r], 1.0), kTol) << where << " row " << r;
  }
}

void expect_columns(const std::vector<float>& got, const Reference& ref, int max_len, const std::string& where) {
  double worst = 0;
  for (size_t h = 0; h < ref.columns.size(); ++h) {
    for (int t = 0; t < max_len; ++t) {
      const double want = t < int(ref.columns[h].size()) ? ref.columns[h][t] : 0.0;
      worst = std::max(worst, close_error(got[h * max_len + t], want));
    }
  }
  EXPECT_LE(worst, kTol) << where << ": column sums";
}

struct Case {
  KvType type;
  int group, head_dim, n;
  std::vector<int64_t> lengths;
  int64_t chunk = 0;  // forced chunk (0: the planner's; kOneChunk: no split, blocks write the output)
};
constexpr int64_t kOneChunk = int64_t(1) << 40;

std::string name(const Case& c) {
  std::ostringstream s;
  s << kv_type_name(c.type) << " group " << c.group << " head_dim " << c.head_dim << " n " << c.n << " chunk "
    << c.chunk << " lengths";
  for (int64_t l : c.lengths) s << ' ' << l;
  return s.str();
}

void check_case(const Case& c, uint32_t seed, bool columns) {
  const Layer L = ragged_test::random_layer(c.type, c.head_dim, c.lengths, seed);
  const int n_heads = L.view.n_heads * c.group;
  const auto q = ragged_test::random_queries(c.n, n_heads, c.head_dim, 1.5f, seed + 1);
  RaggedPlanOptions o;
  o.chunk = c.chunk;
  const RaggedAttentionPlan plan = plan_ragged_attention(L.view, c.n, c.group, o);
  if (c.chunk != 0) {  // forced chunks split, kOneChunk does not
    EXPECT_EQ(plan.split(), c.chunk != kOneChunk) << name(c);
  }
  const RaggedAttentionOutput got = ragged_attention_twin(L.view, plan, q.data());
  const Reference ref = ragged_test::reference(L, q, c.n, c.group);
  expect_attention(got, ref, name(c));
  if (!columns) return;
  const int max_len = int(*std::max_element(c.lengths.begin(), c.lengths.end())) + 3;
  const RaggedColumnPlan cp = plan_ragged_column_sums(L.view, c.n, c.group, max_len);
  expect_columns(ragged_column_sums_twin(L.view, cp, q.data(), got.row_max.data(), got.row_sum.data()), ref, max_len,
                 name(c));
}

// Decode (n = 1) over every element type, GQA group and head size, with uneven heads (empty, one
// entry, lengths that are not multiples of the tile or the chunk), planned and with forced chunks.
TEST(RaggedAttention, DecodeMatchesTheReference) {
  uint32_t seed = 1;
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int group : {1, 2, 4})
      for (int hd : {64, 128, 33}) {
        const std::vector<int64_t> lengths = {0, 1, 300, 4100};
        check_case({type, group, hd, 1, lengths}, seed++, group == 2);
        check_case({type, group, hd, 1, lengths, 128}, seed++, false);
        check_case({type, group, hd, 1, lengths, kOneChunk}, seed++, false);
      }
}

// Blocks of n > 1 queries (prefill and small decode blocks): causal masking where the block's
// entries are the last n of each head, heads shorter than the block, row tiles that straddle
// query rows of a GQA group, single-chunk and split plans.
TEST(RaggedAttention, BlocksMatchTheReferenceWithCausalMasking) {
  uint32_t seed = 100;
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int group : {1, 2, 4}) {
      check_case({type, group, 64, 37, {37, 5, 700, 1500}}, seed++, true);
      check_case({type, group, 128, 3, {3, 1000, 2, 64}}, seed++, true);
      check_case({type, group, 33, 19, {19, 650, 200, 0}, 192}, seed++, true);
      check_case({type, group, 64, 37, {37, 5, 700, 1500}, kOneChunk}, seed++, true);
    }
  check_case({KvType::F16, 4, 256, 9, {9, 300, 1031}}, seed++, true);
  check_case({KvType::F16, 8, 96, 70, {900, 70}}, seed++, true);
}

// Heads of very different lengths in one layer, decode at several thousand entries.
TEST(RaggedAttention, VeryUnevenHeads) {
  check_case({KvType::F16, 4, 128, 1, {6000, 3, 0, 64, 65, 2500, 127, 1}}, 7, true);
  check_case({KvType::BF16, 2, 64, 4, {4, 5000, 4, 129}}, 8, true);
}

// Control for the merge: every key is zero, so each entry a query sees gets the same weight and
// the output is the mean of the values it sees. With value dim 0 = entry index and dim 1 = 1 on
// the last (partial) chunk only, a merge that dropped or double-counted any chunk changes dim 0,
// dim 1 or the softmax denominator (row_sum, exactly the number of entries seen).
TEST(RaggedAttention, MergeUsesEveryChunk) {
  const int64_t len = 1000;  // chunks of 64: 15 full and one of 40
  const Layer L = ragged_test::make_layer(KvType::F32, 64, {len}, 0, [](int, int64_t t, int d, bool value) {
    if (!value) return 0.0f;
    return d == 0 ? float(t) : d == 1 ? (t >= 960 ? 1.0f : 0.0f) : 0.0f;
  });
  const auto q = ragged_test::random_queries(1, 1, 64, 1.0f, 3);
  RaggedPlanOptions o;
  o.chunk = 64;
  const RaggedAttentionPlan plan = plan_ragged_attention(L.view, 1, 1, o);
  ASSERT_EQ(plan.max_chunks, 16);
  const RaggedAttentionOutput got = ragged_attention_twin(L.view, plan, q.data());
  EXPECT_FLOAT_EQ(got.out[0], 499.5f);
  EXPECT_FLOAT_EQ(got.out[1], 0.04f);
  EXPECT_EQ(got.row_max[0], 0.0f);
  EXPECT_EQ(got.row_sum[0], 1000.0f);
  o.chunk = kOneChunk;
  const RaggedAttentionPlan one = plan_ragged_attention(L.view, 1, 1, o);
  ASSERT_FALSE(one.split());
  const RaggedAttentionOutput whole = ragged_attention_twin(L.view, one, q.data());
  EXPECT_FLOAT_EQ(whole.out[0], 499.5f);
  EXPECT_EQ(whole.row_sum[0], 1000.0f);
}

// A layer's shape for the planner (no arenas); head h has len + spread * h entries.
// The decoder's own CPU attention (block_attention over a KVCache holding the same entries): same
// outputs and column sums, so the kernels keep the decoder's contract (causal rule, GQA mapping,
// column layout), not just the test's reading of it.
TEST(RaggedAttention, AgreesWithBlockAttention) {
  ModelConfig c;
  c.name = "ragged";
  c.n_layers = 1;
  c.dim = 64;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.hidden_dim = 64;
  c.vocab_size = 16;
  c.context_length = 4096;
  const int n = 5, group = c.group_size();
  const Layer L = ragged_test::random_layer(KvType::F16, c.head_dim, {700, 40}, 21);
  KVCache cache(c, KvType::F16);
  for (int h = 0; h < c.n_kv_heads; ++h)
    for (int64_t t = 0; t < L.lengths[h]; ++t)
      cache.append(0, h, int32_t(t), &L.k32[h][size_t(t) * c.head_dim], &L.v32[h][size_t(t) * c.head_dim]);
  const auto q = ragged_test::random_queries(n, c.n_heads, c.head_dim, 1.5f, 22);
  std::vector<float> want(q.size());
  std::vector<std::vector<float>> sums;
  block_attention(cache, {0, q.data(), n, c.n_heads, group, want.data(), &sums});
  const RaggedAttentionOutput got = ragged_attention_twin(L.view, plan_ragged_attention(L.view, n, group), q.data());
  for (size_t e = 0; e < want.size(); ++e) ASSERT_LE(close_error(got.out[e], want[e]), kTol) << "element " << e;
  const RaggedColumnPlan cp = plan_ragged_column_sums(L.view, n, group, 700);
  const auto cols = ragged_column_sums_twin(L.view, cp, q.data(), got.row_max.data(), got.row_sum.data());
  ASSERT_EQ(sums.size(), size_t(c.n_heads));
  for (int h = 0; h < c.n_heads; ++h) {
    ASSERT_EQ(sums[h].size(), size_t(L.lengths[h / group]));
    for (size_t t = 0; t < sums[h].size(); ++t)
      ASSERT_LE(close_error(cols[h * 700 + t], sums[h][t]), kTol) << "head " << h << " entry " << t;
  }
}

DeviceKvLayerView shape(int n_heads, int head_dim, int64_t len, int64_t spread = 0) {
  DeviceKvLayerView v;
  v.n_heads = n_heads;
  v.head_dim = head_dim;
  for (int h = 0; h < n_heads && h < kDeviceKvMaxHeads; ++h) v.length[h] = len + spread * h;
  return v;
}

void expect_sound(const RaggedAttentionPlan& p, int64_t longest) {
  EXPECT_EQ(p.threads_per_row * p.rows_per_block, kRaggedThreads);
  EXPECT_LE(p.dims_per_thread, kRaggedMaxDimsPerThread);
  EXPECT_GE(p.dims_per_thread * p.threads_per_row, p.head_dim);
  EXPECT_LE(p.shared_floats * 4, kRaggedSharedBytes);
  EXPECT_EQ(p.chunk % p.tile_keys, 0);
  EXPECT_GE(p.chunk * p.max_chunks, longest);
  EXPECT_LT(p.chunk * (p.max_chunks - 1), std::max<int64_t>(longest, 1));
  EXPECT_EQ(int64_t(p.row_tiles) * p.rows_per_block >= int64_t(p.n) * p.group, true);
}

TEST(RaggedAttentionPlan, DecodeSplitsLongHeadsIntoChunks) {
  const auto v = shape(8, 128, 131072);  // Llama-3.1-8B: 8 KV heads, group 4
  const RaggedAttentionPlan p = plan_ragged_attention(v, 1, 4);
  expect_sound(p, 131072);
  EXPECT_EQ(p.rows_per_block, 4);  // the whole GQA group shares one key tile
  EXPECT_EQ(p.row_tiles, 1);
  EXPECT_EQ(p.tile_keys, 64);
  EXPECT_EQ(p.chunk, 1024);  // 8 blocks without a split; 1024 wanted
  EXPECT_EQ(p.max_chunks, 128);
  EXPECT_EQ(p.workspace_floats, size_t(32) * 128 * 130);
  // Short heads: chunks never go below min_chunk.
  const RaggedAttentionPlan s = plan_ragged_attention(shape(8, 128, 4096), 1, 4);
  EXPECT_EQ(s.chunk, 256);
  EXPECT_EQ(s.max_chunks, 16);
}

TEST(RaggedAttentionPlan, PrefillFillsTheGridWithRowTilesAlone) {
  const RaggedAttentionPlan p = plan_ragged_attention(shape(8, 128, 4096), 4096, 4);
  expect_sound(p, 4096);
  EXPECT_EQ(p.rows_per_block, 16);
  EXPECT_EQ(p.row_tiles, 1024);
  EXPECT_FALSE(p.split());
  EXPECT_EQ(p.workspace_floats, 0u);
}

TEST(RaggedAttentionPlan, BoundsForEveryHeadSize) {
  for (int hd = 1; hd <= kRaggedMaxHeadDim; ++hd)
    for (int n : {1, 3, 64})
      for (int group : {1, 4, 8}) {
        expect_sound(plan_ragged_attention(shape(4, hd, 777, 1), n, group), 777 + 3);
        const RaggedColumnPlan c = plan_ragged_column_sums(shape(4, hd, 777, 1), n, group, 780);
        EXPECT_LE(c.shared_floats * 4, kRaggedSharedBytes);
        EXPECT_GE(int64_t(c.key_tiles) * c.tile_keys, 780);
      }
  const RaggedAttentionPlan big = plan_ragged_attention(shape(4, 256, 100), 64, 1);
  EXPECT_EQ(big.rows_per_block, 8);
  EXPECT_EQ(big.tile_keys, 32);
  // Forced chunks round up to the tile; max_chunks caps the split.
  RaggedPlanOptions o;
  o.chunk = 100;
  EXPECT_EQ(plan_ragged_attention(shape(2, 64, 1000), 1, 1, o).chunk, 128);
  o = {};
  o.max_chunks = 4;
  const RaggedAttentionPlan capped = plan_ragged_attention(shape(2, 64, 100000), 1, 1, o);
  EXPECT_LE(capped.max_chunks, 4);
  expect_sound(capped, 100000);
  // An empty layer: one chunk, nothing to split.
  EXPECT_EQ(plan_ragged_attention(shape(2, 64, 0), 1, 1).max_chunks, 1);
}

template <typename F>
void expect_refused(F&& make, const std::string& says) {
  try {
    make();
    ADD_FAILURE() << "accepted; expected a refusal saying " << says;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(RaggedAttentionPlan, RefusesWhatTheKernelsCannotRun) {
  expect_refused([] { plan_ragged_attention(shape(2, 257, 10), 1, 1); }, "head_dim 257 is outside [1, 256]");
  expect_refused([] { plan_ragged_attention(shape(2, 0, 10), 1, 1); }, "head_dim 0");
  expect_refused([] { plan_ragged_attention(shape(129, 64, 10), 1, 1); }, "129 stored heads");
  expect_refused([] { plan_ragged_attention(shape(128, 64, 10), 1, 64); }, "8192 query heads");
  expect_refused([] { plan_ragged_attention(shape(2, 64, 10), 0, 1); }, "a block of 0 queries");
  expect_refused([] { plan_ragged_attention(shape(2, 64, 10), 1, 0); }, "group 0");
  DeviceKvLayerView v = shape(2, 64, 10);
  v.length[1] = -1;
  expect_refused([&] { plan_ragged_attention(v, 1, 1); }, "stored head 1 has length -1");
  expect_refused([] { plan_ragged_column_sums(shape(2, 64, 10), 1, 1, 9); }, "row stride 9 is below");
  const RaggedAttentionPlan p = plan_ragged_attention(shape(2, 64, 10), 1, 1);
  expect_refused([&] { ragged_attention_twin(shape(3, 64, 10), p, nullptr); }, "another layer shape");
  expect_refused([&] { ragged_attention_twin(shape(2, 64, 10, 100), p, nullptr); },
                 "stored head 1 has 110 entries; the plan covers 64");
  const RaggedColumnPlan cp = plan_ragged_column_sums(shape(2, 64, 10), 1, 1, 10);
  expect_refused([&] { ragged_column_sums_twin(shape(2, 64, 10, 1), cp, nullptr, nullptr, nullptr); },
                 "stored head 1 has 11 entries; the column sums' row stride is 10");
}

}  // namespace
}  // namespace kvevict
