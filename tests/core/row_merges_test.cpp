// The row merges of core/decode/row_merges.h where the rows are: the host over its KVCache
// (HostRowMerges: the float-shortlisted search and the folds through write_entry) against the
// device cache's twin behind a DeviceKvMirror (the element bodies the CUDA kernels run), bit for
// bit in every KvType: the same matches (cosines compared as bits, ties to the first kept), the same
// value norms, and
// after the same folds the same stored words, whether the host head holds its rows (the folded
// rows become placeholders until sync_host reads them back) or positions only (its held norms
// follow the folded rows). Plus the plans' refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/decode/device_kv_merges.h"
#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/engine/host_row_merges.h"
#include "row_merge_cases.h"

namespace kvevict {
namespace {

ModelConfig geometry(int head_dim) {
  ModelConfig c;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = head_dim;
  c.dim = 4 * head_dim;
  c.hidden_dim = c.dim;
  c.vocab_size = 16;
  c.context_length = 1024;
  return c;
}

// A host cache of T random rows per head (ties planted, row 0 zero).
KVCache filled_cache(const ModelConfig& c, KvType type, int T, std::mt19937& rng) {
  KVCache cache(c, type);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      const std::vector<float> keys = test::random_rows_with_ties(T, c.head_dim, rng);
      const std::vector<float> values = test::random_rows_with_ties(T, c.head_dim, rng);
      for (int t = 0; t < T; ++t)
        cache.append(l, h, 100 + t, keys.data() + static_cast<size_t>(t) * c.head_dim,
                     values.data() + static_cast<size_t>(t) * c.head_dim);
    }
  return cache;
}

std::vector<float> rows_of(const KVCache& cache, int l, int h, bool keys) {
  std::vector<float> out(static_cast<size_t>(cache.length(l, h)) * cache.head_dim());
  if (keys) cache.reconstruct_keys(l, h, 0, cache.length(l, h), out.data());
  else cache.reconstruct_values(l, h, 0, cache.length(l, h), out.data());
  return out;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

DeviceKvGeometry geometry_of(const KVCache& cache) {
  return {cache.n_layers(), cache.n_kv_heads(), cache.head_dim(), cache.kv_type()};
}

class RowMergesTest : public ::testing::TestWithParam<KvType> {};

TEST_P(RowMergesTest, TwinBehindTheMirrorMatchesTheHostBitForBit) {
  for (const int d : {5, 24, 64}) {
    std::mt19937 rng(17u + static_cast<uint32_t>(d));
    const ModelConfig c = geometry(d);
    KVCache cache = filled_cache(c, GetParam(), 60, rng);
    DeviceKvTwin twin(geometry_of(cache));
    DeviceKvBackendFor<DeviceKvTwin> backend(twin);
    DeviceKvMirror mirror(cache, backend, MirrorAppends::Host);
    mirror.flush_all();
    KVCache reference = cache;  // a copy is not watched
    HostRowMerges host(reference);
    int64_t folded = 0, ties = 0;
    for (int round = 0; round < 6; ++round)
      for (int l = 0; l < c.n_layers; ++l) {
        // Every head of the layer in one search (the device's one round trip), heads in reverse.
        std::vector<test::RowMergeCase> cases;
        std::vector<KeptKeySearch> searches;
        for (int h = 0; h < c.n_kv_heads; ++h) cases.push_back(test::random_row_merge_case(cache.length(l, h), rng));
        for (int h = c.n_kv_heads - 1; h >= 0; --h)
          searches.push_back({h, cases[static_cast<size_t>(h)].kept, cases[static_cast<size_t>(h)].evicted});
        const auto want = host.nearest_kept_keys(l, searches);
        const auto got = mirror.nearest_kept_keys(l, searches);
        ASSERT_EQ(got.size(), searches.size());
        ASSERT_EQ(want.size(), searches.size());
        for (size_t i = 0; i < searches.size(); ++i) {
          ASSERT_EQ(got[i].size(), searches[i].evicted.size());
          for (size_t e = 0; e < got[i].size(); ++e) {
            ASSERT_EQ(got[i][e].kept, want[i][e].kept) << "d " << d << " evicted " << searches[i].evicted[e];
            ASSERT_TRUE(same_bits(got[i][e].cosine, want[i][e].cosine)) << got[i][e].cosine << " vs " << want[i][e].cosine;
            ties += got[i][e].cosine == 1.0;
          }
        }
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const test::RowMergeCase& m = cases[static_cast<size_t>(h)];
          const std::vector<double> host_norms = host.value_norms(l, h, m.evicted);
          const std::vector<double> twin_norms = mirror.value_norms(l, h, m.evicted);
          ASSERT_EQ(host_norms.size(), twin_norms.size());
          for (size_t e = 0; e < host_norms.size(); ++e) ASSERT_TRUE(same_bits(host_norms[e], twin_norms[e]));
          host.fold_rows(l, h, m.folds);
          mirror.fold_rows(l, h, m.folds);
          folded += static_cast<int64_t>(m.folds.folds.size());
        }
      }
    EXPECT_GT(ties, 0) << "no planted tie was matched";
    EXPECT_EQ(mirror.counts().rows_folded, folded);
    // The folded host rows are placeholders now; sync_host reads the twin's words back.
    bool listed = false;
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) listed = listed || !mirror.placeholder_rows(l, h).empty();
    EXPECT_TRUE(listed);
    mirror.sync_host();
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h) {
        EXPECT_EQ(rows_of(cache, l, h, true), rows_of(reference, l, h, true)) << "d " << d << " keys " << l << "/" << h;
        EXPECT_EQ(rows_of(cache, l, h, false), rows_of(reference, l, h, false)) << "d " << d << " values";
      }
  }
}

// Ties go to the first kept entry in the kept list's order, wherever it lies in the cache.
TEST_P(RowMergesTest, TiesGoToTheFirstInKeptOrder) {
  std::mt19937 rng(5);
  KVCache cache = filled_cache(geometry(8), GetParam(), 22, rng);  // rows 6 and 7 hold equal keys
  DeviceKvTwin twin(geometry_of(cache));
  DeviceKvBackendFor<DeviceKvTwin> backend(twin);
  DeviceKvMirror mirror(cache, backend, MirrorAppends::Host);
  HostRowMerges host(cache);
  for (const std::vector<int>& kept : {std::vector<int>{7, 6}, std::vector<int>{6, 7}}) {
    const std::vector<int> evicted{3, 10};  // equally close to 6 and 7
    const std::vector<KeptKeySearch> search{{0, kept, evicted}};
    const std::vector<KeptKeyMatch> h = host.nearest_kept_keys(0, search)[0];
    const std::vector<KeptKeyMatch> t = mirror.nearest_kept_keys(0, search)[0];
    for (size_t e = 0; e < evicted.size(); ++e) {
      EXPECT_EQ(h[e].kept, 0) << "a tie between 6 and 7 goes to the one listed first";
      EXPECT_EQ(t[e].kept, 0);
      EXPECT_TRUE(same_bits(h[e].cosine, t[e].cosine));
    }
  }
  // A zero key (row 0) has the clamped norm: cosine 0 with every key, matched to the first kept.
  const std::vector<int> two{5, 9}, zero_row{0};
  const std::vector<KeptKeyMatch> zero = mirror.nearest_kept_keys(0, std::vector<KeptKeySearch>{{0, two, zero_row}})[0];
  EXPECT_EQ(zero[0].kept, 0);
  EXPECT_EQ(zero[0].cosine, 0.0);
}

// A host head that holds positions only (its rows released to the device) holding its rows'
// norms: after a fold on the device the held norms are the folded rows' norms, and sync_host
// brings back the folded rows, equal to the host's own fold.
TEST_P(RowMergesTest, PositionOnlyHeadsKeepTheirHeldNormsInStep) {
  std::mt19937 rng(29);
  const ModelConfig c = geometry(16);
  KVCache cache = filled_cache(c, GetParam(), 40, rng);
  DeviceKvTwin twin(geometry_of(cache));
  DeviceKvBackendFor<DeviceKvTwin> backend(twin);
  DeviceKvMirror mirror(cache, backend, MirrorAppends::Decoder);
  KVCache reference = cache;
  ASSERT_EQ(mirror.release_host_rows(), c.n_layers * c.n_kv_heads);
  mirror.hold_row_norms(true);
  HostRowMerges host(reference);
  const test::RowMergeCase m = test::random_row_merge_case(40, rng);
  RowFolds folds = m.folds;
  folds.keys = folds.values = true;
  host.fold_rows(1, 0, folds);
  mirror.fold_rows(1, 0, folds);
  ASSERT_TRUE(cache.rows_held_elsewhere(1, 0));
  ASSERT_TRUE(cache.holds_row_norms(1, 0));
  const std::vector<float> keys = rows_of(reference, 1, 0, true), values = rows_of(reference, 1, 0, false);
  std::vector<float> key_norms(40), value_norms(40);
  compute_row_norms(keys.data(), 40, 16, key_norms.data());
  compute_row_norms(values.data(), 40, 16, value_norms.data());
  const std::span<const RowNorms> held = cache.held_row_norms(1, 0);
  for (int t = 0; t < 40; ++t) {
    EXPECT_EQ(held[static_cast<size_t>(t)].key, key_norms[static_cast<size_t>(t)]) << t;
    EXPECT_EQ(held[static_cast<size_t>(t)].value, value_norms[static_cast<size_t>(t)]) << t;
  }
  mirror.sync_host();
  EXPECT_EQ(rows_of(cache, 1, 0, true), keys);
  EXPECT_EQ(rows_of(cache, 1, 0, false), values);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, RowMergesTest, ::testing::Values(KvType::F32, KvType::F16, KvType::BF16),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

TEST(RowMergePlans, RefuseWhatAKernelWouldReadWrongly) {
  std::vector<float> rows(40, 1.0f);
  DeviceKvTwin twin({1, 1, 4, KvType::F16});
  twin.append(0, 10, rows.data(), rows.data(), 4, std::vector<int32_t>{0});
  const DeviceKvLayout& l = twin.layout();
  RowFolds folds;
  folds.values = true;
  folds.folds = {{.target = 2, .first_term = 0, .terms = 1}};
  folds.terms = {{.row = 5, .weight = 1.0}};
  EXPECT_NO_THROW(plan_fold_rows(l, 0, 0, nullptr, nullptr, folds));
  folds.terms[0].row = 2;  // a target read as a term
  EXPECT_THROW(plan_fold_rows(l, 0, 0, nullptr, nullptr, folds), std::invalid_argument);
  folds.terms[0].row = 10;  // beyond the head
  EXPECT_THROW(plan_fold_rows(l, 0, 0, nullptr, nullptr, folds), std::invalid_argument);
  folds.terms[0].row = 5;
  folds.folds.push_back(folds.folds[0]);  // folded twice
  EXPECT_THROW(plan_fold_rows(l, 0, 0, nullptr, nullptr, folds), std::invalid_argument);
  folds.folds = {{.target = 2, .first_term = 0, .terms = 2}};  // terms beyond the list
  EXPECT_THROW(plan_fold_rows(l, 0, 0, nullptr, nullptr, folds), std::invalid_argument);
  const std::vector<int> none, zero{0}, one{1}, minus{-1};
  const auto plan = [&](int head, const std::vector<int>& kept, const std::vector<int>& evicted) {
    return plan_nearest_kept_keys(l, 0, nullptr, std::vector<KeptKeySearch>{{head, kept, evicted}});
  };
  EXPECT_THROW(plan(0, none, one), std::invalid_argument);
  EXPECT_THROW(plan(1, zero, one), std::invalid_argument);
  EXPECT_THROW(plan(0, minus, one), std::invalid_argument);
  const DeviceKvNearestPlan ok = plan(0, zero, one);
  EXPECT_EQ(ok.kept_rows.size(), 1u);
  EXPECT_EQ(ok.kept_begin, std::vector<int32_t>{0});
  EXPECT_THROW(plan_value_norms(l, 0, 0, nullptr, std::vector<int>{10}), std::invalid_argument);
}

}  // namespace
}  // namespace kvevict
