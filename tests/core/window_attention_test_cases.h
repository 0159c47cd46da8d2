#pragma once
// Test helpers of the window attention tests (CPU and GPU): a random layer in host arenas laid out
// as the device cache lays them (ragged_attention_test_layer.h: heads at spaced base rows, NaN key
// words in between, so a read outside a head's rows poisons the result) plus a positions arena,
// either ascending (prefill order, gaps between positions) or a random permutation (a cache kept
// in score order), and the window queries.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/decode/window_attention_twin.h"
#include "ragged_attention_test_layer.h"

namespace kvevict::window_test {

struct Case {
  KvType type = KvType::F16;
  int group = 1, head_dim = 64, W = 8;
  std::vector<int64_t> lengths;
  bool causal = true, scaled = true, ascending = true;
  // Where window row 0 sits: kBlind puts it W/2 before every position (the first rows see
  // nothing), kSeesAll puts row W/2 at the last position (the last rows see everything), kMiddle
  // in the middle of the positions' span.
  enum Where { kBlind, kSeesAll, kMiddle } where = kMiddle;
  int64_t max_len = 0;  // row stride (0: the longest head)
  int64_t chunk = 0;    // entries per chunk of a split plan (0: the planner's choice)
};

inline std::string name(const Case& c) {
  static const char* wheres[] = {"blind", "sees-all", "middle"};
  std::string s = std::string(kv_type_name(c.type)) + " group " + std::to_string(c.group) + " head_dim " +
                  std::to_string(c.head_dim) + " W " + std::to_string(c.W) + " lengths";
  for (int64_t l : c.lengths) {
    s += ' ';  // two appends, not " " + string: GCC 12's -Wrestrict misfires on that
    s += std::to_string(l);
  }
  s += c.causal ? " causal" : " non-causal";
  s += c.scaled ? " scaled" : " unscaled";
  s += c.ascending ? " ascending" : " permuted";
  if (c.max_len > 0) s += " max_len " + std::to_string(c.max_len);
  if (c.chunk > 0) s += " chunk " + std::to_string(c.chunk);
  return s + " " + wheres[c.where];
}

struct Problem {
  ragged_test::Layer layer;          // keys (values unused), view.positions over `positions`
  std::vector<int32_t> positions;    // one per arena row (0 in the gaps: their keys are NaN)
  std::vector<float> queries;        // [W][n_heads][head_dim]
  int32_t span = 0;                  // positions lie in [0, span)
  WindowPlanOptions options;
};

inline Problem make_problem(const Case& c, uint32_t seed) {
  Problem P;
  P.layer = ragged_test::random_layer(c.type, c.head_dim, c.lengths, seed);
  const int64_t longest = c.lengths.empty() ? 0 : *std::max_element(c.lengths.begin(), c.lengths.end());
  P.span = static_cast<int32_t>(2 * longest + 8);  // room for gaps between kept positions
  const size_t rows = P.layer.keys.size() / (size_t(c.head_dim) * (c.type == KvType::F32 ? 2 : 1));
  P.positions.assign(rows, 0);
  std::mt19937 rng(seed + 17);
  std::vector<int32_t> all(static_cast<size_t>(P.span));
  std::iota(all.begin(), all.end(), 0);
  for (size_t h = 0; h < c.lengths.size(); ++h) {
    // A random subset of the span, as eviction leaves it: sorted (positional order) or shuffled.
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<int32_t> kept(all.begin(), all.begin() + c.lengths[h]);
    if (c.ascending) std::sort(kept.begin(), kept.end());
    std::copy(kept.begin(), kept.end(), P.positions.begin() + P.layer.view.base_row[h]);
  }
  P.layer.view.positions = P.positions.data();
  const int n_heads = P.layer.view.n_heads * c.group;
  // Logits of spread ~1.5 either way: unscaled runs get queries 1/sqrt(head_dim) smaller.
  const float q_scale = c.scaled ? 1.5f : 1.5f / std::sqrt(float(c.head_dim));
  P.queries = ragged_test::random_queries(c.W, n_heads, c.head_dim, q_scale, seed + 1);
  P.options.causal = c.causal;
  P.options.scaled = c.scaled;
  P.options.max_len = c.max_len;
  P.options.chunk = c.chunk;
  P.options.query_position0 = c.where == Case::kBlind     ? -c.W / 2
                              : c.where == Case::kSeesAll ? P.span - 1 - c.W / 2
                                                          : P.span / 2;
  return P;
}

// The CPU sweep: every KvType x group x head_dim, with W, order, mask, scale and window place
// cycling, over very uneven heads (empty, one entry, a tile and a bit, long).
inline std::vector<Case> sweep_cases() {
  std::vector<Case> cases;
  const int Ws[] = {0, 1, 8, 32, 64};
  int i = 0;
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16})
    for (int group : {1, 2, 4, 8})
      for (int hd : {1, 33, 64, 128, 256}) {
        Case c;
        c.type = type;
        c.group = group;
        c.head_dim = hd;
        c.W = Ws[i % 5];
        c.lengths = {int64_t(37 + i % 3), 0, 1, 300, 65};
        c.causal = i % 4 != 3;
        c.scaled = i % 3 != 2;
        c.ascending = i % 2 == 0;
        c.where = static_cast<Case::Where>(i % 3);
        cases.push_back(c);
        ++i;
      }
  return cases;
}

// A case's problem, its plan and the twin's output (moving keeps the arenas' addresses: vectors).
struct TwinRun {
  Problem P;
  WindowAttentionPlan plan;
  std::vector<float> out;
};
inline TwinRun run_twin(const Case& c, uint32_t seed) {
  TwinRun r{make_problem(c, seed), {}, {}};
  r.plan = plan_window_attention(r.P.layer.view, c.W, c.group, r.P.options);
  r.out = window_attention_twin(r.P.layer.view, r.plan, r.P.queries.data());
  return r;
}

// A case with the seed of its random layer: the CPU and GPU tests run the same ones.
struct SeededCase {
  Case c;
  uint32_t seed = 0;
};

// Every window size at every place, both orders, causal and not, on one shape.
inline std::vector<SeededCase> place_cases() {
  std::vector<SeededCase> cases;
  uint32_t seed = 500;
  for (int W : {0, 1, 8, 32, 64})
    for (Case::Where where : {Case::kBlind, Case::kSeesAll, Case::kMiddle})
      for (bool ascending : {true, false})
        for (bool causal : {true, false}) {
          Case c;
          c.type = KvType::F16;
          c.group = 4;
          c.head_dim = 64;
          c.W = W;
          c.lengths = {0, 5, 200, 64, 1};
          c.where = where;
          c.ascending = ascending;
          c.causal = causal;
          cases.push_back({c, seed++});
        }
  return cases;
}

// Long and uneven heads (many key tiles), then a row stride wider than the longest head.
inline std::vector<SeededCase> long_head_cases() {
  std::vector<SeededCase> cases;
  for (bool ascending : {true, false}) {
    Case c;
    c.type = KvType::BF16;
    c.group = 2;
    c.head_dim = 128;
    c.W = 32;
    c.lengths = {3000, 70, 0};
    c.ascending = ascending;
    c.where = Case::kSeesAll;
    cases.push_back({c, 900u + ascending});
    c.max_len = 3100;
    c.where = Case::kMiddle;
    cases.push_back({c, 910u + ascending});
  }
  return cases;
}

// Plans split along the cache (chunks of a few key tiles, forced): heads shorter than one chunk or
// empty (their chunks see nothing), a head ending inside a chunk, a row stride past the longest
// head, blind and full rows, causal and not; then the planner's own split of long heads with few
// row tiles (W 8, group 1: one row tile per head).
inline std::vector<SeededCase> split_cases() {
  std::vector<SeededCase> cases;
  uint32_t seed = 1300;
  for (int64_t chunk : {64, 100, 256})
    for (Case::Where where : {Case::kBlind, Case::kSeesAll, Case::kMiddle})
      for (bool causal : {true, false}) {
        Case c;
        c.type = chunk == 100 ? KvType::BF16 : KvType::F16;
        c.group = 4;
        c.head_dim = 64;
        c.W = 8;
        c.lengths = {700, 0, 37, 513, 64};
        c.where = where;
        c.causal = causal;
        c.ascending = where != Case::kMiddle;
        c.max_len = chunk == 256 ? 900 : 0;
        c.chunk = chunk;
        cases.push_back({c, seed++});
      }
  Case planned;
  planned.type = KvType::F16;
  planned.group = 1;
  planned.head_dim = 128;
  planned.W = 8;
  planned.lengths = {5000, 3000, 0, 1, 4500};
  planned.where = Case::kSeesAll;
  cases.push_back({planned, seed++});
  planned.causal = false;
  planned.ascending = false;
  cases.push_back({planned, seed++});
  return cases;
}

}  // namespace kvevict::window_test
