// Selection: protected entries, the tie rule, seeded Gumbel-top-k sampling, Ada-KV layer scope.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "core/engine/counter_rng.h"
#include "core/engine/selection.h"

namespace kvevict {
namespace {

TEST(CounterRng, Philox4x32_10KnownAnswers) {
  // Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32_10).
  Philox4x32 zero{{0, 0, 0, 0}};
  const Philox4x32 a = philox4x32_10(zero, 0, 0);
  EXPECT_EQ(a.v[0], 0x6627e8d5u);
  EXPECT_EQ(a.v[1], 0xe169c58du);
  EXPECT_EQ(a.v[2], 0xbc57ac4cu);
  EXPECT_EQ(a.v[3], 0x9b00dbd8u);
  Philox4x32 ones{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
  const Philox4x32 b = philox4x32_10(ones, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
}

TEST(CounterRng, UniformIsOpenAndDependsOnEveryKeyPart) {
  const float base = counter_uniform(5, 1, 2, 3);
  EXPECT_GT(base, 0.0f);
  EXPECT_LT(base, 1.0f);
  EXPECT_NE(base, counter_uniform(6, 1, 2, 3));
  EXPECT_NE(base, counter_uniform(5, 0, 2, 3));
  EXPECT_NE(base, counter_uniform(5, 1, 1, 3));
  EXPECT_NE(base, counter_uniform(5, 1, 2, 4));
  EXPECT_NE(base, counter_uniform(5, 1, 2, 3, kScoreStream));
  EXPECT_EQ(base, counter_uniform(5, 1, 2, 3));
  // The DSL's random() is this generator on the score stream (docs/DSL.md §7).
  EXPECT_EQ(kv_dsl_random(5, 1, 2, 3), counter_uniform(5, 1, 2, 3, kScoreStream));
}

std::vector<int32_t> iota_positions(int T) {
  std::vector<int32_t> p(T);
  std::iota(p.begin(), p.end(), 0);
  return p;
}

TEST(Selection, ProtectedAlwaysKeptAndCountsExact) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 120);
    std::vector<float> s(T);
    for (float& v : s) v = std::uniform_real_distribution<float>(-5, 5)(rng);
    HeadSelectionSpec spec;
    spec.budget = static_cast<int>(rng() % (T + 10));
    spec.protect_first = static_cast<int>(rng() % 6);
    spec.protect_recent = static_cast<int>(rng() % 10);
    spec.random_share = (rng() % 2) ? 0.5 : 0.0;
    spec.seed = rng();
    const auto pos = iota_positions(T);
    const auto kept = select_head(s, pos, spec);
    ASSERT_EQ(static_cast<int>(kept.size()), std::min(spec.budget, T));
    const std::set<int> k(kept.begin(), kept.end());
    ASSERT_EQ(k.size(), kept.size()) << "duplicates";
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    const int n_prot = std::min(T, spec.protect_first + spec.protect_recent);
    if (spec.budget >= n_prot) {
      for (int i = 0; i < T; ++i)
        if (i < spec.protect_first || i >= T - spec.protect_recent) {
          EXPECT_TRUE(k.count(i)) << "trial " << trial;
        }
    }
  }
}

TEST(Selection, TieRuleHigherScoreThenEarlierPosition) {
  const std::vector<float> s = {1, 3, 3, 2, 3, std::nanf("")};
  const auto pos = iota_positions(6);
  HeadSelectionSpec spec;
  spec.budget = 2;
  EXPECT_EQ(select_head(s, pos, spec), (std::vector<int>{1, 2}));
  spec.budget = 5;
  EXPECT_EQ(select_head(s, pos, spec), (std::vector<int>{0, 1, 2, 3, 4}));  // NaN ranks last
  spec.budget = 3;
  spec.score_order = true;
  EXPECT_EQ(select_head(s, pos, spec), (std::vector<int>{1, 2, 4}));
}

// select_head against a plain sort-based ranking written here (no random share), on random heads:
// positions increasing along the cache (the O(T) paths: no sort by position, a partition for the top
// set) or shuffled (the sorts), scores with ties and NaNs, every budget regime, both kept orders.
std::vector<int> naive_select(const std::vector<float>& s, const std::vector<int32_t>& pos, const HeadSelectionSpec& spec) {
  const int T = static_cast<int>(pos.size());
  std::vector<int> by_pos(T);
  std::iota(by_pos.begin(), by_pos.end(), 0);
  std::sort(by_pos.begin(), by_pos.end(), [&](int a, int b) { return pos[a] < pos[b]; });
  auto in_position_order = [&](std::vector<int> v) {
    std::sort(v.begin(), v.end(), [&](int a, int b) { return pos[a] < pos[b]; });
    return v;
  };
  if (spec.budget >= T) {  // all of them: in cache order when the kept order is the score's
    std::vector<int> all(T);
    std::iota(all.begin(), all.end(), 0);
    return spec.score_order ? all : by_pos;
  }
  std::vector<int> prot;  // sinks by position, then the newest not yet taken, newest first
  std::vector<bool> taken(T, false);
  for (int i : by_pos)
    if (pos[i] < spec.protect_first) prot.push_back(i), taken[i] = true;
  for (int j = T - 1, n = 0; j >= 0 && n < spec.protect_recent; --j, ++n)
    if (!taken[by_pos[j]]) prot.push_back(by_pos[j]), taken[by_pos[j]] = true;
  if (static_cast<int>(prot.size()) >= spec.budget) {
    prot.resize(std::max(spec.budget, 0));
    return in_position_order(prot);
  }
  std::vector<int> cand;
  for (int i = 0; i < T; ++i)
    if (!taken[i]) cand.push_back(i);
  std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) {
    const bool na = std::isnan(s[a]), nb = std::isnan(s[b]);
    if (na != nb) return nb;
    if (!na && s[a] != s[b]) return s[a] > s[b];
    return pos[a] < pos[b];
  });
  cand.resize(spec.budget - prot.size());
  std::vector<int> kept = cand;
  for (int i : in_position_order(prot)) kept.push_back(i);
  return spec.score_order ? kept : in_position_order(kept);
}

TEST(Selection, MatchesAPlainSortedRankingOnRandomHeads) {
  std::mt19937 rng(20261207);
  int cases = 0;
  for (int round = 0; round < 400; ++round) {
    const int T = static_cast<int>(rng() % 300);
    std::vector<int32_t> pos(T);
    int32_t p = static_cast<int32_t>(rng() % 5);
    for (int t = 0; t < T; ++t) pos[t] = p += 1 + static_cast<int32_t>(rng() % 3);
    if (round % 2) std::shuffle(pos.begin(), pos.end(), rng);
    std::vector<float> s(T);
    for (float& x : s) x = rng() % 17 == 0 ? std::nanf("") : static_cast<float>(rng() % 40) * 0.25f;
    HeadSelectionSpec spec;
    spec.budget = T == 0 ? 0 : static_cast<int>(rng() % (T + 3));
    spec.protect_first = static_cast<int>(rng() % 12);
    spec.protect_recent = static_cast<int>(rng() % 20);
    for (const bool score_order : {false, true}) {
      spec.score_order = score_order;
      ASSERT_EQ(select_head(s, pos, spec), naive_select(s, pos, spec))
          << "round " << round << " T " << T << " budget " << spec.budget << " score order " << score_order;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 800);
}

TEST(Selection, BudgetBelowProtectedKeepsSinksThenNewest) {
  const std::vector<float> s(10, 0.0f);
  const auto pos = iota_positions(10);
  HeadSelectionSpec spec;
  spec.protect_first = 2;
  spec.protect_recent = 4;
  spec.budget = 4;
  EXPECT_EQ(select_head(s, pos, spec), (std::vector<int>{0, 1, 8, 9}));
}

HeadSelectionSpec nacl_spec(uint64_t seed) {
  HeadSelectionSpec spec;
  spec.budget = 40;
  spec.protect_first = 2;
  spec.protect_recent = 4;
  spec.random_share = 0.6;
  spec.seed = seed;
  spec.layer = 1;
  spec.kv_head = 2;
  return spec;
}

TEST(Selection, SameSeedSameResultDifferentSeedsChangeTheRandomShare) {
  std::mt19937 rng(5);
  std::vector<float> s(300);
  for (float& v : s) v = std::uniform_real_distribution<float>(0, 3)(rng);
  const auto pos = iota_positions(300);
  const auto a = select_head(s, pos, nacl_spec(1));
  EXPECT_EQ(a, select_head(s, pos, nacl_spec(1)));
  const auto b = select_head(s, pos, nacl_spec(2));
  EXPECT_NE(a, b);
  // The top-k share (free 34 -> 20 random, 14 top) is the same for both seeds.
  HeadSelectionSpec top_only = nacl_spec(0);
  top_only.budget = 2 + 4 + 14;
  top_only.random_share = 0;
  for (int i : select_head(s, pos, top_only)) {
    EXPECT_TRUE(std::count(a.begin(), a.end(), i));
    EXPECT_TRUE(std::count(b.begin(), b.end(), i));
  }
}

TEST(Selection, RandomShareDoesNotDependOnCacheOrder) {
  std::mt19937 rng(8);
  std::vector<float> s(100);
  for (float& v : s) v = std::uniform_real_distribution<float>(0, 2)(rng);
  auto pos = iota_positions(100);
  const auto kept = select_head(s, pos, nacl_spec(9));
  std::set<int> expected(kept.begin(), kept.end());
  std::vector<int> perm(100);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> s2(100);
  std::vector<int32_t> pos2(100);
  for (int i = 0; i < 100; ++i) s2[i] = s[perm[i]], pos2[i] = pos[perm[i]];
  std::set<int> got;
  for (int i : select_head(s2, pos2, nacl_spec(9))) got.insert(pos2[i]);
  EXPECT_EQ(got, expected);
}

TEST(Selection, SamplingFollowsSoftmaxOfScoreOverTemperature) {
  // One random slot among three candidates with softmax(s / T) = 1/6, 2/6, 3/6.
  const double T = 0.5;
  const std::vector<float> s = {static_cast<float>(T * std::log(1.0)), static_cast<float>(T * std::log(2.0)),
                                static_cast<float>(T * std::log(3.0))};
  const auto pos = iota_positions(3);
  std::vector<int> count(3, 0);
  const int n = 30000;
  for (int seed = 0; seed < n; ++seed) {
    HeadSelectionSpec spec;
    spec.budget = 1;
    spec.random_share = 1.0;
    spec.temperature = T;
    spec.seed = static_cast<uint64_t>(seed);
    ++count[select_head(s, pos, spec).at(0)];
  }
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(count[i] / static_cast<double>(n), (i + 1) / 6.0, 0.015) << i;
}

TEST(Selection, AdaKvLayerScopeExactTotalAndFloor) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    const int H = 1 + static_cast<int>(rng() % 4), T = 20 + static_cast<int>(rng() % 60);
    std::vector<std::vector<float>> s(H, std::vector<float>(T));
    for (auto& v : s)
      for (float& x : v) x = std::exponential_distribution<float>(1.0f + (&v - s.data()))(rng);
    const auto pos = iota_positions(T);
    std::vector<std::span<const float>> sc;
    std::vector<std::span<const int32_t>> ps;
    for (int h = 0; h < H; ++h) sc.emplace_back(s[h]), ps.emplace_back(pos);
    const int B = 5 + static_cast<int>(rng() % (T - 5));
    const double alpha = 0.2;
    const auto kept = select_layer_adaptive(sc, ps, std::vector<int>(H, B), 0, 4, alpha, false);
    int total = 0;
    for (int h = 0; h < H; ++h) {
      total += static_cast<int>(kept[h].size());
      EXPECT_GE(static_cast<double>(kept[h].size()), 4 + std::floor(alpha * (B - 4)));
      for (int r = T - 4; r < T; ++r) EXPECT_TRUE(std::count(kept[h].begin(), kept[h].end(), r));
    }
    EXPECT_EQ(total, H * B) << "trial " << trial;
  }
}

}  // namespace
}  // namespace kvevict
