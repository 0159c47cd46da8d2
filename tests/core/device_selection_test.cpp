// Device-side selection's CPU twin (core/engine/device_selection_twin.h) against the CPU engine's
// select_head / select_layer_adaptive (core/engine/selection.h) on random cases
// (device_selection_cases.h): identical kept lists, element for element, in the kept order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/engine/device_selection_twin.h"
#include "core/util/error.h"
#include "device_selection_cases.h"

namespace kvevict {
namespace {

using devsel_test::HeadCase;

// Runs the twin on a layer of heads, each with its own spec.
std::vector<std::vector<int>> twin_heads(const std::vector<HeadCase>& heads) {
  std::vector<std::vector<float>> s;
  std::vector<std::vector<int32_t>> p;
  std::vector<devsel::HeadParams> params;
  for (const HeadCase& c : heads) {
    s.push_back(c.scores);
    p.push_back(c.positions);
    params.push_back(device_head_params(c.spec));
  }
  const PackedSelectionLayer packed = pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p));
  return twin_select_heads(packed.input, params);
}

std::string describe(const HeadCase& c) {
  const HeadSelectionSpec& s = c.spec;
  return "length " + std::to_string(c.scores.size()) + " budget " + std::to_string(s.budget) + " first " +
         std::to_string(s.protect_first) + " recent " + std::to_string(s.protect_recent) + " share " +
         std::to_string(s.random_share) + " T " + std::to_string(s.temperature) + " seed " + std::to_string(s.seed) +
         " score_order " + std::to_string(s.score_order);
}

TEST(DeviceSelection, TwinEqualsSelectHeadOnRandomCases) {
  std::mt19937 rng(20261204);
  int compared = 0, with_random = 0;
  for (int i = 0; i < 240; ++i) {
    const int n_heads = 1 + static_cast<int>(rng() % 3);
    std::vector<HeadCase> heads;
    for (int h = 0; h < n_heads; ++h) heads.push_back(devsel_test::random_head(rng, devsel_test::random_length(rng, i), h));
    const auto got = twin_heads(heads);
    for (int h = 0; h < n_heads; ++h) {
      const HeadCase& c = heads[h];
      const std::vector<int> want = select_head(c.scores, c.positions, c.spec);
      ASSERT_EQ(got[h], want) << "case " << i << " head " << h << ": " << describe(c);
      ++compared;
      with_random += c.spec.random_share > 0;
    }
  }
  EXPECT_GT(with_random, 50);
  EXPECT_GT(compared, 400);
}

TEST(DeviceSelection, TwinEqualsSelectHeadAtLengthBoundaries) {
  std::mt19937 rng(7);
  for (int n : {0, 1, 2, 5, 64}) {
    for (int budget : {0, 1, n - 1, n, n + 1}) {
      for (int first : {0, 1, 3}) {
        for (int recent : {0, 2, n}) {
          for (bool order : {false, true}) {
            HeadCase c;
            c.scores = devsel_test::random_scores(rng, n);
            c.positions = devsel_test::random_positions(rng, n);
            c.spec.budget = std::max(0, budget);
            c.spec.protect_first = first;
            c.spec.protect_recent = recent;
            c.spec.score_order = order;
            c.spec.random_share = (budget % 2) ? 0.5 : 0.0;
            c.spec.seed = 99;
            ASSERT_EQ(twin_heads({c})[0], select_head(c.scores, c.positions, c.spec)) << describe(c);
          }
        }
      }
    }
  }
}

TEST(DeviceSelection, TwinEqualsSelectHeadOnLongTiedHeadsWithSeveralSeeds) {
  std::mt19937 rng(3);
  for (int seed = 0; seed < 3; ++seed) {
    HeadCase c;
    const int n = 100000;
    c.scores.resize(n);
    for (float& x : c.scores) x = static_cast<float>(rng() % 4);  // 4 distinct values
    c.positions = devsel_test::random_positions(rng, n);
    c.spec.budget = n * 3 / 100;
    c.spec.protect_first = 4;
    c.spec.protect_recent = 64;
    c.spec.random_share = seed == 0 ? 0.0 : 0.3;
    c.spec.seed = 1000 + seed;
    c.spec.score_order = seed != 1;
    ASSERT_EQ(twin_heads({c})[0], select_head(c.scores, c.positions, c.spec)) << describe(c);
  }
}

TEST(DeviceSelection, TwinEqualsSelectLayerAdaptive) {
  std::mt19937 rng(11);
  for (int i = 0; i < 120; ++i) {
    const int H = 1 + static_cast<int>(rng() % 8);
    std::vector<std::vector<float>> s;
    std::vector<std::vector<int32_t>> p;
    std::vector<int> budget;
    for (int h = 0; h < H; ++h) {
      const int n = (i % 30 == 29) ? 30000 + static_cast<int>(rng() % 20000) : static_cast<int>(rng() % 800);
      s.push_back(devsel_test::random_scores(rng, n));
      p.push_back(devsel_test::random_positions(rng, n));
      const int choices[] = {0, 1, 3, n, n + 2, n * 3 / 100, static_cast<int>(rng() % (n + 1))};
      budget.push_back(choices[rng() % 7]);
    }
    const int first = static_cast<int>(rng() % 5), recent = static_cast<int>(rng() % 20);
    const double alphas[] = {0.0, 0.2, 0.5, 1.0};
    const double alpha = alphas[rng() % 4];
    const bool order = rng() % 2;
    const PackedSelectionLayer packed = pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p));
    const auto got = twin_select_layer_adaptive(packed.input, budget, first, recent, alpha, order);
    const auto want =
        select_layer_adaptive(devsel_test::spans(s), devsel_test::spans(p), budget, first, recent, alpha, order);
    ASSERT_EQ(got, want) << "case " << i << " heads " << H << " alpha " << alpha << " order " << order;
  }
}

// The input built from a DeviceKvLayerView: ragged heads whose positions sit at arena rows
// base_row[h] (not packed from row 0), scores dense with a stride longer than the heads.
TEST(DeviceSelection, TwinOnAViewOfTheDeviceCacheLayoutEqualsSelectHead) {
  std::mt19937 rng(17);
  const int lengths[] = {700, 0, 1, 2500};
  const int64_t stride = 3000;
  std::vector<int32_t> arena(9000, -7);
  std::vector<float> scores(4 * stride, 0.0f);
  DeviceKvLayerView view;
  view.n_heads = 4;
  view.positions = arena.data();
  std::vector<devsel::HeadParams> params;
  std::vector<HeadCase> heads;
  int64_t row = 100;
  for (int h = 0; h < 4; ++h) {
    HeadCase c = devsel_test::random_head(rng, lengths[h], h);
    view.base_row[h] = row;
    view.length[h] = lengths[h];
    std::copy(c.positions.begin(), c.positions.end(), arena.begin() + row);
    std::copy(c.scores.begin(), c.scores.end(), scores.begin() + h * stride);
    row += lengths[h] + 13;
    params.push_back(device_head_params(c.spec));
    heads.push_back(std::move(c));
  }
  const devsel::SelLayerInput in = selection_input(view, scores.data(), stride);
  EXPECT_EQ(in.max_length, 2500);
  const auto got = twin_select_heads(in, params);
  for (int h = 0; h < 4; ++h)
    EXPECT_EQ(got[h], select_head(heads[h].scores, heads[h].positions, heads[h].spec)) << describe(heads[h]);
  EXPECT_THROW(selection_input(view, scores.data(), 1000), UsageError);  // stride shorter than a head
}

// A GPU runs the threads of a phase in any order: the twin's result must not depend on it.
TEST(DeviceSelection, TwinResultDoesNotDependOnThreadOrder) {
  std::mt19937 rng(23);
  for (int i = 0; i < 40; ++i) {
    std::vector<std::vector<float>> s;
    std::vector<std::vector<int32_t>> p;
    std::vector<devsel::HeadParams> params;
    std::vector<int> budget;
    for (int h = 0; h < 3; ++h) {
      HeadCase c = devsel_test::random_head(rng, devsel_test::random_length(rng, i), h);
      s.push_back(c.scores);
      p.push_back(c.positions);
      params.push_back(device_head_params(c.spec));
      budget.push_back(c.spec.budget);
    }
    const PackedSelectionLayer packed = pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p));
    const auto heads = twin_select_heads(packed.input, params);
    const auto ada = twin_select_layer_adaptive(packed.input, budget, 2, 5, 0.3, i % 2);
    for (TwinThreadOrder order : {TwinThreadOrder::Descending, TwinThreadOrder::Interleaved}) {
      ASSERT_EQ(twin_select_heads(packed.input, params, order), heads) << "case " << i;
      ASSERT_EQ(twin_select_layer_adaptive(packed.input, budget, 2, 5, 0.3, i % 2, order), ada) << "case " << i;
    }
  }
}

// A reference with a deliberately wrong tie rule (larger position first): the same comparison
// must tell it apart from the twin on tied scores, so the tests above can see a tie-rule error.
std::vector<int> wrong_tie_rule_top(const std::vector<float>& s, const std::vector<int32_t>& p, int k) {
  std::vector<int> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    if (s[a] != s[b]) return s[a] > s[b];
    return p[a] > p[b];
  });
  idx.resize(k);
  return idx;
}

TEST(DeviceSelection, WrongTieRuleIsDetected) {
  std::mt19937 rng(5);
  HeadCase c;
  const int n = 2000;
  for (int i = 0; i < n; ++i) c.scores.push_back(static_cast<float>(rng() % 3));
  c.positions = devsel_test::random_positions(rng, n);
  c.spec.budget = 100;
  c.spec.score_order = true;
  const std::vector<int> got = twin_heads({c})[0];
  EXPECT_EQ(got, select_head(c.scores, c.positions, c.spec));
  EXPECT_NE(got, wrong_tie_rule_top(c.scores, c.positions, c.spec.budget));
  // The wrong rule agrees on the scores, only the tie order differs: the detection is the tie rule.
  std::vector<float> a, b;
  for (int i : got) a.push_back(c.scores[i]);
  for (int i : wrong_tie_rule_top(c.scores, c.positions, c.spec.budget)) b.push_back(c.scores[i]);
  EXPECT_EQ(a, b);
}

TEST(DeviceSelection, BadInputThrows) {
  HeadSelectionSpec spec;
  spec.budget = -1;
  EXPECT_THROW(device_head_params(spec), UsageError);
  spec.budget = 3;
  spec.random_share = 1.5;
  EXPECT_THROW(device_head_params(spec), UsageError);
  spec.random_share = 0.5;
  spec.temperature = 0;
  EXPECT_THROW(device_head_params(spec), UsageError);
  spec.temperature = 1;
  spec.protect_recent = -2;
  EXPECT_THROW(device_head_params(spec), UsageError);
  devsel::SelLayerInput in;
  in.n_heads = devsel::kSelMaxHeads + 1;
  EXPECT_THROW(check_selection_input(in), UsageError);
  in.n_heads = 1;
  in.max_length = 4;
  in.length[0] = 5;
  EXPECT_THROW(check_selection_input(in), UsageError);
  in.length[0] = 4;
  EXPECT_THROW(check_selection_input(in), UsageError);  // null rows
  in.n_heads = 128;
  in.max_length = 1 << 25;  // 2^32 entries in the layer
  in.length[0] = 0;
  EXPECT_THROW(check_selection_input(in), UsageError);
  EXPECT_THROW(adaptive_head_params({1, -1}, 0, 0, 0.5, false), UsageError);
  EXPECT_THROW(adaptive_head_params({1, 1}, 0, 0, 1.5, false), UsageError);
  const std::vector<std::vector<float>> s = {{1, 2}};
  const std::vector<std::vector<int32_t>> p = {{0, 1, 2}};
  EXPECT_THROW(pack_selection_layer(devsel_test::spans(s), devsel_test::spans(p)), UsageError);
}

}  // namespace
}  // namespace kvevict
