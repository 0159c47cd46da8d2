// The window attention kernel's CPU twin (core/decode/window_attention_twin.h), which runs the
// kernel's own tile and normalisation phases, against the engine's host computation of the same
// signal (compute_window_attention, core/engine/attention_signals.h; itself held to a scalar double
// softmax by window_attention_test.cpp), and the planner's choices and refusals. Both sides
// read the same keys: the reference gets each key as f32 converted from the view's stored words
// (device_kv_load), which is exactly what the twin's tiles hold.
//
// Tolerance. Both sides compute in f32 (unit roundoff u = 2^-24 ~ 6e-8) but in different orders
// (BLAS sgemm and a polynomial exp with ~2e-7 relative error on the host; sequential dots, an
// online max/sum and expf in the twin). Logits are dots of head_dim <= 256 products; the queries
// are drawn so that logits spread ~1.5 either way, so sum |q_i k_i| * scale is ~1.2 * sqrt(d) <= 20
// and a logit's worst-case error is d * u * 20 <= 3e-4 (random signs give ~1e-6). A probability
// exp(x - m) / l carries its logit's error and the max's as a RELATIVE error, so each entry is
// held to |got - want| <= 1e-3 * want + 1e-7: 1e-3 covers twice the worst case, the 1e-7 floor
// covers the tiny probabilities where the host's exp and expf leave the normal range differently.
// Any real mistake breaks this by orders of magnitude: a wrong mask turns a 0 into a probability
// or the reverse (relative error 1), a wrong head or scale changes every logit by O(1).
// Row sums: the sum of a row's T probabilities is 1 up to T * u of the f32 sum l (worst case 2.4e-4
// for T <= 4096; ~sqrt(T) * u ~ 1e-6 typically), held to 5e-4; a row that sees nothing sums to 0
// exactly. Observed worst errors are printed by the sweep (RecordProperty and stdout).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/decode/window_attention_twin.h"
#include "core/engine/attention_signals.h"
#include "core/util/error.h"
#include "window_attention_test_cases.h"

namespace kvevict {
namespace {

using window_test::Case;
using window_test::Problem;

constexpr double kRel = 1e-3, kAbs = 1e-7, kSumTol = 5e-4;

// The engine's A per stored head ([G][W][T] each). head_shift != 0 plants a wrong-head bug (the
// queries of stored head kv + head_shift) and position_shift a wrong mask (window positions moved).
std::vector<std::vector<float>> engine_reference(const Problem& P, const Case& c, int head_shift = 0,
                                                 int position_shift = 0) {
  const DeviceKvLayerView& v = P.layer.view;
  const int n_heads = v.n_heads * c.group, d = v.head_dim;
  std::vector<std::vector<float>> refs;
  for (int kv = 0; kv < v.n_heads; ++kv) {
    const int T = int(v.length[kv]);
    std::vector<float> keys(size_t(T) * d);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < d; ++i) keys[size_t(t) * d + i] = device_kv_load(v.keys, v.type, v.base_row[kv] + t, d, i);
    std::vector<float> out(size_t(c.group) * c.W * T, 0.0f);
    compute_window_attention(P.queries.data(), c.W, n_heads, P.options.query_position0 + position_shift,
                             (kv + head_shift) % v.n_heads, c.group, keys.data(), v.positions + v.base_row[kv], T, d,
                             out.data(), c.causal, c.scaled);
    refs.push_back(std::move(out));
  }
  return refs;
}

struct Comparison {
  double worst_ratio = 0;  // max over entries of |got - want| / (kRel * want + kAbs); <= 1 passes
  double max_abs = 0, max_rel = 0, worst_sum = 0;  // observed; max_rel over want > 1e-4
  bool sums_ok = true, padding_zero = true;
  std::string at;
  bool ok() const { return worst_ratio <= 1.0 && sums_ok && padding_zero; }
};

Comparison compare(const std::vector<float>& got, const WindowAttentionPlan& plan, const Problem& P,
                   const std::vector<std::vector<float>>& refs) {
  Comparison r;
  const int G = plan.group, W = plan.W;
  for (int kv = 0; kv < plan.n_kv; ++kv) {
    const int64_t T = P.layer.view.length[kv];
    for (int row = 0; row < G * W; ++row) {
      const float* g_row = got.data() + window_out_row(plan, kv, row);
      const float* w_row = refs[size_t(kv)].data() + size_t(row) * T;
      double sum = 0, want_sum = 0;
      for (int64_t t = 0; t < T; ++t) {
        const double err = std::abs(double(g_row[t]) - w_row[t]);
        const double ratio = std::isfinite(g_row[t]) ? err / (kRel * w_row[t] + kAbs) : INFINITY;
        r.max_abs = std::max(r.max_abs, err);
        if (w_row[t] > 1e-4) r.max_rel = std::max(r.max_rel, err / w_row[t]);
        if (ratio > r.worst_ratio) {
          r.worst_ratio = ratio;
          r.at = "head " + std::to_string(kv) + " row " + std::to_string(row) + " entry " + std::to_string(t) +
                 ": got " + std::to_string(g_row[t]) + " want " + std::to_string(w_row[t]);
        }
        sum += g_row[t];
        want_sum += w_row[t];
      }
      for (int64_t t = T; t < plan.max_len; ++t) r.padding_zero = r.padding_zero && g_row[t] == 0.0f;
      // A row sums to 1, or to exactly 0 when it sees nothing (the reference's row is all zeros).
      const double dev = want_sum == 0 ? std::abs(sum) * 1e30 : std::abs(sum - 1.0);
      r.worst_sum = std::max(r.worst_sum, dev);
      r.sums_ok = r.sums_ok && dev <= kSumTol;
    }
  }
  return r;
}

// Observed worst errors over a test, reported at its end.
struct Observed {
  double max_abs = 0, max_rel = 0, worst_sum = 0, worst_ratio = 0;
  void add(const Comparison& c) {
    max_abs = std::max(max_abs, c.max_abs);
    max_rel = std::max(max_rel, c.max_rel);
    worst_sum = std::max(worst_sum, c.worst_sum);
    worst_ratio = std::max(worst_ratio, c.worst_ratio);
  }
  void report(const char* test) const {
    std::printf("[ observed ] %s: max |err| %.3g, max rel err %.3g, max |row sum - 1| %.3g, worst err / tol %.3g\n",
                test, max_abs, max_rel, worst_sum, worst_ratio);
  }
};

Comparison run_case(const Case& c, uint32_t seed) {
  const window_test::TwinRun run = window_test::run_twin(c, seed);
  const Problem& P = run.P;
  const WindowAttentionPlan& plan = run.plan;
  const std::vector<float>& got = run.out;
  EXPECT_EQ(got.size(), plan.out_floats) << name(c);
  const Comparison r = compare(got, plan, P, engine_reference(P, c));
  EXPECT_TRUE(r.ok()) << name(c) << ": worst " << r.at << " (err / tol " << r.worst_ratio << "), worst row sum "
                      << r.worst_sum << (r.padding_zero ? "" : ", nonzero padding");
  return r;
}

TEST(WindowAttentionTwin, MatchesTheEngineOnTheSweep) {
  Observed o;
  uint32_t seed = 1;
  for (const Case& c : window_test::sweep_cases()) o.add(run_case(c, seed++));
  o.report("sweep");
}

// Every window size at every place, both orders, causal and not, on one shape.
TEST(WindowAttentionTwin, EveryWindowSizeAndPlace) {
  Observed o;
  for (const window_test::SeededCase& s : window_test::place_cases()) o.add(run_case(s.c, s.seed));
  o.report("window sizes and places");
}

// Long and uneven heads (many key tiles), a row stride wider than the longest head (padding 0).
TEST(WindowAttentionTwin, LongHeadsAndAWideRowStride) {
  Observed o;
  for (const window_test::SeededCase& s : window_test::long_head_cases()) o.add(run_case(s.c, s.seed));
  o.report("long heads");
}

// Rows split along the cache (window_attention_tiles.h: per-chunk partials, then a second pass
// that combines them): the same tolerance against the engine; and against the same problem run
// in one chunk, every probability within 1e-4 relative, zeros exactly where the one-chunk run has
// them. The logits and the row max are the same bits; only the row sum l adds its positive f32
// terms in another grouping: a thread of the one-chunk run sums at most 313 of a row's entries
// here (5000 entries / 16 threads per row), so each l is within 313 u ~ 1.9e-5 relative of the
// exact sum (u = 2^-24) and the two within ~4e-5. A lost or double-counted chunk moves every
// probability of its row by that chunk's share of l (the engine comparison catches it too).

TEST(WindowAttentionTwin, RowsSplitAlongTheCacheMatchTheEngineAndOneChunk) {
  Observed o;
  int split = 0;
  for (const window_test::SeededCase& s : window_test::split_cases()) {
    o.add(run_case(s.c, s.seed));
    const window_test::TwinRun run = window_test::run_twin(s.c, s.seed);
    EXPECT_GT(run.plan.chunks, 1) << name(s.c);
    EXPECT_EQ(run.plan.chunk % run.plan.tile_keys, 0) << name(s.c);
    EXPECT_EQ(run.plan.partial_floats, size_t(run.plan.n_kv) * s.c.group * s.c.W * run.plan.chunks * 2);
    split += run.plan.chunks > 1;
    Case whole = s.c;
    whole.chunk = int64_t(1) << 40;  // one chunk covers every row
    const window_test::TwinRun one = window_test::run_twin(whole, s.seed);
    ASSERT_EQ(one.plan.chunks, 1);
    ASSERT_EQ(one.out.size(), run.out.size());
    for (size_t e = 0; e < one.out.size(); ++e) {
      if (one.out[e] == 0.0f) {
        ASSERT_EQ(run.out[e], 0.0f) << name(s.c) << " element " << e;
        continue;
      }
      ASSERT_LE(std::abs(double(run.out[e]) - one.out[e]), 1e-4 * one.out[e]) << name(s.c) << " element " << e;
    }
  }
  EXPECT_EQ(split, int(window_test::split_cases().size()));
  o.report("split along the cache");
}

// The planner splits only what the row tiles leave idle: short heads or many row tiles give one
// chunk; long heads with few row tiles give chunks of at least min_chunk entries (a multiple of the
// key tile) and at most max_chunks per row; a forced chunk is rounded up to the tile.
TEST(WindowAttentionTwin, PlansSplitLongHeadsWithFewRowTiles) {
  DeviceKvLayerView v;
  v.n_heads = 8;
  v.head_dim = 128;
  for (int h = 0; h < 8; ++h) v.length[h] = 1000;
  EXPECT_EQ(plan_window_attention(v, 32, 4).chunks, 1) << "heads shorter than min_chunk";
  EXPECT_EQ(plan_window_attention(v, 32, 4).partial_floats, 0u);
  for (int h = 0; h < 8; ++h) v.length[h] = 131072;
  const WindowAttentionPlan p = plan_window_attention(v, 32, 4);  // SnapKV's window at 128K: 64 blocks unsplit
  EXPECT_EQ(int64_t(p.row_tiles) * p.n_kv, 64);
  EXPECT_GE(int64_t(p.row_tiles) * p.chunks * p.n_kv, WindowPlanOptions{}.target_blocks);
  EXPECT_GE(p.chunk, WindowPlanOptions{}.min_chunk);
  EXPECT_EQ(p.chunk % p.tile_keys, 0);
  EXPECT_EQ(p.chunks, (131072 + p.chunk - 1) / p.chunk);
  WindowPlanOptions few;
  few.max_chunks = 4;
  EXPECT_EQ(plan_window_attention(v, 32, 4, few).chunks, 4);
  WindowPlanOptions many_blocks;
  many_blocks.target_blocks = 64;
  EXPECT_EQ(plan_window_attention(v, 32, 4, many_blocks).chunks, 1) << "the row tiles fill the target";
  WindowPlanOptions forced;
  forced.chunk = 100;
  const WindowAttentionPlan f = plan_window_attention(v, 32, 4, forced);
  EXPECT_EQ(f.chunk, 128);
  EXPECT_EQ(f.chunks, 1024);
}

// The rows before the first position see nothing (all zeros); rows past the last see every entry.
TEST(WindowAttentionTwin, BlindRowsAreZeroAndFullRowsSeeEverything) {
  Case c;
  c.type = KvType::F32;
  c.group = 2;
  c.head_dim = 33;
  c.W = 8;
  c.lengths = {40, 9};
  c.where = Case::kBlind;  // rows at positions -4 .. 3
  const window_test::TwinRun blind = window_test::run_twin(c, 77);
  const WindowAttentionPlan& plan = blind.plan;
  const std::vector<float>& got = blind.out;
  for (int kv = 0; kv < 2; ++kv)
    for (int g = 0; g < c.group; ++g)
      for (int w = 0; w < 4; ++w)  // positions < 0: nothing is visible
        for (int64_t t = 0; t < plan.max_len; ++t)
          EXPECT_EQ(got[window_out_row(plan, kv, g * c.W + w) + size_t(t)], 0.0f) << kv << " " << g << " " << w;
  Case all = c;
  all.where = Case::kSeesAll;
  const window_test::TwinRun full = window_test::run_twin(all, 78);
  const WindowAttentionPlan& qp = full.plan;
  const std::vector<float>& seen = full.out;
  for (int kv = 0; kv < 2; ++kv)
    for (int64_t t = 0; t < full.P.layer.view.length[kv]; ++t)  // the last row sees every entry
      EXPECT_GT(seen[window_out_row(qp, kv, all.W - 1) + size_t(t)], 0.0f) << kv << " " << t;
}

// Planted bugs: the comparison must fail against a reference with a wrong mask (window positions
// moved by one), with the queries of the wrong head, and with the other causal mode.
TEST(WindowAttentionTwin, PlantedBugsAreCaught) {
  for (bool ascending : {true, false}) {
    Case c;
    c.type = KvType::F16;
    c.group = 4;
    c.head_dim = 64;
    c.W = 8;
    c.lengths = {50, 120, 17};
    c.ascending = ascending;
    const window_test::TwinRun run = window_test::run_twin(c, 31 + ascending);
    const Problem& P = run.P;
    const WindowAttentionPlan& plan = run.plan;
    const std::vector<float>& got = run.out;
    ASSERT_TRUE(compare(got, plan, P, engine_reference(P, c)).ok()) << "the unplanted comparison must pass";
    const Comparison mask = compare(got, plan, P, engine_reference(P, c, 0, 1));
    const Comparison head = compare(got, plan, P, engine_reference(P, c, 1, 0));
    Case other = c;
    other.causal = false;
    const Comparison causal = compare(got, plan, P, engine_reference(P, other));
    EXPECT_FALSE(mask.ok()) << "a mask shifted by one position went unnoticed";
    EXPECT_FALSE(head.ok()) << "the wrong head's queries went unnoticed";
    EXPECT_FALSE(causal.ok()) << "a non-causal reference went unnoticed";
    std::printf("[ planted  ] %s: shifted mask err/tol %.3g, wrong head err/tol %.3g, non-causal err/tol %.3g\n",
                ascending ? "ascending" : "permuted", mask.worst_ratio, head.worst_ratio, causal.worst_ratio);
  }
}

// Plans: shared memory within the no-opt-in limit, rows per block covering small windows.
TEST(WindowAttentionTwin, PlansFitTheKernel) {
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.length[0] = 100;
  v.length[1] = 7;
  for (int hd : {1, 33, 64, 128, 256})
    for (int group : {1, 2, 4, 8})
      for (int W : {0, 1, 8, 64}) {
        v.head_dim = hd;
        const WindowAttentionPlan p = plan_window_attention(v, W, group);
        EXPECT_LE(p.shared_floats * int(sizeof(float)), kWindowSharedBytes) << hd;
        EXPECT_EQ(p.threads_per_row * p.rows_per_block, kWindowThreads);
        EXPECT_GE(int64_t(p.row_tiles) * p.rows_per_block, int64_t(group) * W);
        EXPECT_EQ(p.max_len, 100);
        EXPECT_EQ(p.out_floats, size_t(2) * group * W * 100);
      }
  v.head_dim = 64;
  EXPECT_EQ(plan_window_attention(v, 2, 1).rows_per_block, 2);
  EXPECT_EQ(plan_window_attention(v, 64, 8).rows_per_block, kWindowMaxRows);
  WindowPlanOptions o;
  o.scaled = false;
  EXPECT_EQ(plan_window_attention(v, 2, 1, o).scale, 1.0f);
  EXPECT_EQ(plan_window_attention(v, 2, 1).scale, 0.125f);
}

// A refusal naming `value` in its message.
template <typename F>
void expect_refusal(F f, const std::string& value) {
  try {
    f();
    ADD_FAILURE() << "not refused: " << value;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what() << " does not name " << value;
  }
}

TEST(WindowAttentionTwin, PlanningRefusesBadInput) {
  DeviceKvLayerView v;
  v.n_heads = 2;
  v.head_dim = 64;
  v.length[0] = 10;
  v.length[1] = 20;
  auto plan = [](DeviceKvLayerView view, int W, int group, WindowPlanOptions o = {}) {
    return [=] { (void)plan_window_attention(view, W, group, o); };
  };
  DeviceKvLayerView bad = v;
  bad.head_dim = 0;
  expect_refusal(plan(bad, 1, 1), "head_dim 0");
  bad.head_dim = 257;
  expect_refusal(plan(bad, 1, 1), "head_dim 257");
  expect_refusal(plan(v, -1, 1), "W -1");
  expect_refusal(plan(v, 1, 0), "group 0");
  bad = v;
  bad.n_heads = kDeviceKvMaxHeads + 1;
  expect_refusal(plan(bad, 1, 1), std::to_string(kDeviceKvMaxHeads + 1) + " stored heads");
  bad.n_heads = 0;
  expect_refusal(plan(bad, 1, 1), "0 stored heads");
  bad = v;
  bad.length[1] = -3;
  expect_refusal(plan(bad, 1, 1), "length -3");
  bad.length[1] = int64_t(INT_MAX) + 1;
  expect_refusal(plan(bad, 1, 1), "length " + std::to_string(int64_t(INT_MAX) + 1));
  expect_refusal(plan(v, INT_MAX / 2, 4), std::to_string(INT_MAX / 2));
  expect_refusal(plan(v, 1 << 20, 32), std::to_string(1 << 20));  // queries past int indexing
  WindowPlanOptions o;
  o.query_position0 = INT_MAX - 2;
  expect_refusal(plan(v, 8, 1, o), std::to_string(INT_MAX - 2));
  o = {};
  o.max_len = 19;
  expect_refusal(plan(v, 8, 1, o), "max_len 19");
  // A plan outgrown by its view, or run over another layer shape.
  const WindowAttentionPlan p = plan_window_attention(v, 4, 2);
  DeviceKvLayerView grown = v;
  grown.length[0] = 21;
  expect_refusal([&] { (void)window_attention_twin(grown, p, nullptr); }, "21 entries");
  DeviceKvLayerView other = v;
  other.head_dim = 128;
  expect_refusal([&] { (void)window_attention_twin(other, p, nullptr); }, "another layer shape");
  // A plan whose chunks do not cover its rows (a hand-made one: no chunk; a chunk count off by one).
  WindowAttentionPlan no_chunk = p;
  no_chunk.chunk = 0;
  expect_refusal([&] { (void)window_attention_twin(v, no_chunk, nullptr); }, "do not cover");
  WindowAttentionPlan miscounted = p;
  miscounted.chunks = 2;
  expect_refusal([&] { (void)window_attention_twin(v, miscounted, nullptr); }, "do not cover");
  // A plan changed after planning: its derived sizes no longer match (each field alone).
  std::vector<std::function<void(WindowAttentionPlan&)>> edits = {
      [](WindowAttentionPlan& q) { q.W += 1; },
      [](WindowAttentionPlan& q) { q.group = 1; },
      [](WindowAttentionPlan& q) { q.out_floats -= 1; },
      [](WindowAttentionPlan& q) { q.partial_floats = 2; },
      [](WindowAttentionPlan& q) { q.rows_per_block *= 2; },
      [](WindowAttentionPlan& q) { q.threads_per_row /= 2; },
      [](WindowAttentionPlan& q) { q.row_tiles += 1; },
      [](WindowAttentionPlan& q) { q.shared_floats -= 1; },
      [](WindowAttentionPlan& q) { q.n_heads += 1; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    WindowAttentionPlan edited = p;
    edits[i](edited);
    SCOPED_TRACE("edit " + std::to_string(i));
    expect_refusal([&] { (void)window_attention_twin(v, edited, nullptr); }, "derived sizes");
  }
}

}  // namespace
}  // namespace kvevict
