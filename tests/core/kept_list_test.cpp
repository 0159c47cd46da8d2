// Kept lists (core/decode/kept_list.h) against a plain reference: the in-place prefix, whether the
// list ascends and the first fault in list order, over random lists of every kind (identity,
// ascending with a prefix, shuffled tails, out-of-range and repeated indices); and KVCache::keep,
// which applies only the part after the prefix, against a rebuild of the kept entries on dense F32
// heads and on row-less heads that hold their rows' norms.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/decode/kept_list.h"
#include "core/decode/kv_cache.h"

namespace kvevict {
namespace {

struct Reference {
  size_t in_place = 0;
  bool ascending = true;
  KeptListCheck::Fault fault = KeptListCheck::Fault::None;
  int index = 0;
};

Reference reference(const std::vector<int>& kept, int length) {
  Reference r;
  std::vector<char> seen(static_cast<size_t>(length), 0);
  for (size_t i = 0; i < kept.size(); ++i) {
    const int idx = kept[i];
    if (idx < 0 || idx >= length) return {r.in_place, r.ascending, KeptListCheck::Fault::OutOfRange, idx};
    if (seen[static_cast<size_t>(idx)]) return {r.in_place, r.ascending, KeptListCheck::Fault::Twice, idx};
    seen[static_cast<size_t>(idx)] = 1;
  }
  while (r.in_place < kept.size() && kept[r.in_place] == static_cast<int>(r.in_place)) ++r.in_place;
  for (size_t i = 1; i < kept.size(); ++i) r.ascending = r.ascending && kept[i - 1] < kept[i];
  return r;
}

// A random kept list of a head of `length` entries: survivors in order with a kept prefix, maybe a
// shuffled tail, maybe one bad index.
std::vector<int> random_list(std::mt19937& rng, int length) {
  std::vector<int> kept;
  const int prefix = length > 0 ? static_cast<int>(rng() % static_cast<unsigned>(length + 1)) : 0;
  for (int i = 0; i < length; ++i)
    if (i < prefix || rng() % 3 != 0) kept.push_back(i);
  if (rng() % 3 == 0 && kept.size() > static_cast<size_t>(prefix))
    std::shuffle(kept.begin() + prefix, kept.end(), rng);
  switch (rng() % 8) {
    case 0:
      if (!kept.empty()) kept[rng() % kept.size()] = length + static_cast<int>(rng() % 3);  // out of range
      break;
    case 1:
      if (!kept.empty()) kept.push_back(kept[rng() % kept.size()]);  // twice
      break;
    case 2:
      if (!kept.empty()) kept[rng() % kept.size()] = -1;
      break;
    default:
      break;
  }
  return kept;
}

TEST(KeptList, ShapesAndFaultsMatchAPlainScan) {
  std::mt19937 rng(11);
  int faults = 0, partial_prefixes = 0, unordered = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const int length = static_cast<int>(rng() % 40);
    const std::vector<int> kept = random_list(rng, length);
    const Reference want = reference(kept, length);
    const KeptListCheck got = check_kept_list(kept, length);
    ASSERT_EQ(got.fault, want.fault) << "trial " << trial;
    if (want.fault != KeptListCheck::Fault::None) {
      EXPECT_EQ(got.index, want.index) << "the first fault in list order, trial " << trial;
      ++faults;
      continue;
    }
    EXPECT_EQ(got.shape.in_place, want.in_place) << "trial " << trial;
    EXPECT_EQ(got.shape.ascending, want.ascending) << "trial " << trial;
    const KeptListShape shape = kept_list_shape(kept);
    EXPECT_EQ(shape.in_place, want.in_place);
    EXPECT_EQ(shape.ascending, want.ascending);
    partial_prefixes += want.in_place > 0 && want.in_place < kept.size();
    unordered += !want.ascending;
  }
  EXPECT_GT(faults, 500);
  EXPECT_GT(partial_prefixes, 500);
  EXPECT_GT(unordered, 200);
}

ModelConfig one_layer_config() {
  ModelConfig c;
  c.n_layers = 1;
  c.dim = 8;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.head_dim = 4;
  c.hidden_dim = 8;
  c.vocab_size = 16;
  c.context_length = 1000;
  return c;
}

TEST(KeptList, KVCacheKeepMovesOnlyWhatFollowsThePrefix) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    KVCache dense(one_layer_config(), KvType::F32), rowless(one_layer_config(), KvType::F32);
    const int length = 1 + static_cast<int>(rng() % 30);
    std::vector<float> row(4);
    for (int t = 0; t < length; ++t) {
      std::iota(row.begin(), row.end(), 10.0f * t);  // entry t's row: 10t, 10t + 1, ...
      dense.append(0, 0, 3 * t, row.data(), row.data());
      const RowNorms norms{static_cast<float>(t), static_cast<float>(-t)};
      rowless.append_position(0, 1, 3 * t, &norms);
    }
    std::vector<int> kept;
    do {
      kept = random_list(rng, length);
    } while (check_kept_list(kept, length).fault != KeptListCheck::Fault::None);
    dense.keep(0, 0, kept);
    rowless.keep(0, 1, kept);
    ASSERT_EQ(dense.length(0, 0), static_cast<int>(kept.size()));
    ASSERT_EQ(rowless.length(0, 1), static_cast<int>(kept.size()));
    if (kept.empty()) continue;  // a head of no entries holds no norms to read
    const std::span<const RowNorms> norms = rowless.held_row_norms(0, 1);
    for (size_t i = 0; i < kept.size(); ++i) {
      const int t = kept[i];
      EXPECT_EQ(dense.positions(0, 0)[i], 3 * t) << "trial " << trial;
      EXPECT_EQ(dense.keys(0, 0)[i * 4 + 2], 10.0f * t + 2) << "trial " << trial;
      EXPECT_EQ(dense.values(0, 0)[i * 4 + 3], 10.0f * t + 3) << "trial " << trial;
      EXPECT_EQ(rowless.positions(0, 1)[i], 3 * t) << "trial " << trial;
      EXPECT_EQ(norms[i].key, static_cast<float>(t)) << "trial " << trial;
      EXPECT_EQ(norms[i].value, static_cast<float>(-t)) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace kvevict
