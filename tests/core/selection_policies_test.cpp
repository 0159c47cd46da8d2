// Selection beyond fixed top-k, against brute-force and independent double references
// (reference_selection_policies.cpp): threshold selection with the budget as its cap
// (threshold_selection.h), frozen insertion-time scores (select.score_at: insertion), staged
// selection (staged_selection.h), the model-wide pool (model_selection.h) and the mass budget
// (mass_budget.h); and the field files that use them on stories260K: dms (kvpress DMSPress, at
// prefill and at every decode step) and composed (kvpress ComposedPress, SnapKV then Knorm).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "core/engine/mass_budget.h"
#include "core/engine/model_selection.h"
#include "core/engine/selection.h"
#include "core/engine/staged_selection.h"
#include "core/engine/threshold_selection.h"
#include "decode_spy.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "policy_run_checks.h"
#include "policy_test_prompt.h"
#include "stories_prompt_test.h"
#include "reference_selection_policies.h"
#include "test_models.h"

namespace kvevict {
namespace {

// ---- Mechanisms against brute force ------------------------------------------------------------

// Random head: scores with ties and NaN, shuffled positions.
struct RandomHead {
  std::vector<float> score;
  std::vector<int32_t> pos;
};
RandomHead random_head(std::mt19937& rng, int T) {
  RandomHead h;
  std::uniform_int_distribution<int> level(0, 9);
  for (int i = 0; i < T; ++i) {
    const int v = level(rng);
    h.score.push_back(v == 0 ? NAN : static_cast<float>(v) * 0.5f - 2.0f);  // ties on purpose
    h.pos.push_back(i);
  }
  std::shuffle(h.pos.begin(), h.pos.end(), rng);
  return h;
}

// "a before b": score desc (NaN last), position asc: written again here, not taken from the engine.
bool better(float sa, int32_t pa, float sb, int32_t pb) {
  if (std::isnan(sa) != std::isnan(sb)) return std::isnan(sb);
  if (!std::isnan(sa) && sa != sb) return sa > sb;
  return pa < pb;
}

// Brute force: protected = first positions < first, then the `recent` newest (priority: sinks
// ascending, then newest first); then candidates >= threshold, best first, until the cap.
std::vector<int32_t> brute_threshold(const RandomHead& h, int cap, int first, int recent, double threshold) {
  const int T = static_cast<int>(h.pos.size());
  std::vector<int32_t> sorted = h.pos;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> prot;
  for (int32_t p : sorted)
    if (p < first) prot.push_back(p);
  for (int j = T - 1, n = 0; j >= 0 && n < recent; --j, ++n)
    if (sorted[j] >= first) prot.push_back(sorted[j]);
  std::vector<int32_t> kept(prot.begin(), prot.begin() + std::min<int>(cap, prot.size()));
  std::vector<int> pass;
  for (int i = 0; i < T; ++i)
    if (std::find(prot.begin(), prot.end(), h.pos[i]) == prot.end() && h.score[i] >= threshold) pass.push_back(i);
  std::sort(pass.begin(), pass.end(), [&](int a, int b) { return better(h.score[a], h.pos[a], h.score[b], h.pos[b]); });
  for (int i : pass)
    if (static_cast<int>(kept.size()) < cap) kept.push_back(h.pos[i]);
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::vector<int32_t> positions_of(const RandomHead& h, const std::vector<int>& idx) {
  std::vector<int32_t> out;
  for (int i : idx) out.push_back(h.pos[i]);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ThresholdSelection, KeepsProtectedAndPassingEntriesUpToTheCapAsBruteForce) {
  std::mt19937 rng(7);
  int capped = 0, uncapped = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 40);
    const RandomHead h = random_head(rng, T);
    const int cap = static_cast<int>(rng() % (T + 3)), first = static_cast<int>(rng() % 4), recent = static_cast<int>(rng() % 6);
    const double threshold = static_cast<double>(rng() % 9) * 0.5 - 2.25 + (trial % 3 == 0 ? 0.25 : 0.0);
    const int b = threshold_budget(h.score, h.pos, cap, first, recent, threshold);
    HeadSelectionSpec spec;
    spec.budget = b;
    spec.protect_first = first;
    spec.protect_recent = recent;
    const auto want = brute_threshold(h, cap, first, recent, threshold);
    EXPECT_EQ(positions_of(h, select_head(h.score, h.pos, spec)), want) << "trial " << trial;
    EXPECT_EQ(b, static_cast<int>(want.size())) << "the threshold's budget is the kept count";
    (b == cap ? capped : uncapped) += 1;
  }
  EXPECT_GT(capped, 20);
  EXPECT_GT(uncapped, 20);
}

TEST(ModelSelection, OnePoolOverEveryHeadAsBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    const int L = 1 + static_cast<int>(rng() % 3), H = 1 + static_cast<int>(rng() % 3);
    const int recent = static_cast<int>(rng() % 3);
    std::vector<std::vector<RandomHead>> heads(L);
    std::vector<std::vector<std::span<const float>>> sc(L);
    std::vector<std::vector<std::span<const int32_t>>> pos(L);
    std::vector<int> budget(L);
    for (int l = 0; l < L; ++l) {
      budget[l] = static_cast<int>(rng() % 12);
      for (int h = 0; h < H; ++h) heads[l].push_back(random_head(rng, 1 + static_cast<int>(rng() % 15)));
      for (int h = 0; h < H; ++h) {
        sc[l].emplace_back(heads[l][h].score);
        pos[l].emplace_back(heads[l][h].pos);
      }
    }
    const auto kept = select_model_wide(sc, pos, budget, 0, recent, false);
    // Brute force: every (l, h) keeps its `recent` newest (at most its budget); the pool is the sum
    // of what the budgets leave, filled by the best other entries of the whole model.
    struct E { float s; int32_t p; int l, h; };
    std::vector<E> all;
    std::vector<std::vector<std::vector<int32_t>>> want(L, std::vector<std::vector<int32_t>>(H));
    size_t pool = 0;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        std::vector<int32_t> sorted = heads[l][h].pos;
        std::sort(sorted.rbegin(), sorted.rend());
        const int T = static_cast<int>(sorted.size());
        const int prot = std::min(recent, T);
        for (int j = 0; j < std::min(prot, budget[l]); ++j) want[l][h].push_back(sorted[j]);
        for (int i = 0; i < T; ++i)
          if (heads[l][h].pos[i] < sorted[prot - 1 < 0 ? 0 : prot - 1] || prot == 0)
            all.push_back({heads[l][h].score[i], heads[l][h].pos[i], l, h});
        pool += std::clamp(budget[l] - std::min(prot, budget[l]), 0, T - prot);
      }
    std::sort(all.begin(), all.end(), [](const E& a, const E& b) {
      if (std::isnan(a.s) != std::isnan(b.s)) return std::isnan(b.s);
      if (!std::isnan(a.s) && a.s != b.s) return a.s > b.s;
      return std::tie(a.p, a.l, a.h) < std::tie(b.p, b.l, b.h);
    });
    for (size_t j = 0; j < pool && j < all.size(); ++j) want[all[j].l][all[j].h].push_back(all[j].p);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        std::sort(want[l][h].begin(), want[l][h].end());
        EXPECT_EQ(positions_of(heads[l][h], kept[l][h]), want[l][h]) << "trial " << trial << " layer " << l << " head " << h;
      }
  }
}

TEST(StagedSelection, AStageKeepsItsShareAndTheLastAtMostTheBudget) {
  EXPECT_EQ(stage_keep_count(180, 0.7f, 1000, false), 125) << "int(180 * 0.7) = 125 in double, as kvpress";
  EXPECT_EQ(stage_keep_count(10, 0.7f, 1000, false), 7) << "the float 0.7 is the decimal the file wrote";
  EXPECT_EQ(stage_keep_count(180, 0.7, 100, false), 125) << "an earlier stage is not capped";
  EXPECT_EQ(stage_keep_count(180, 0.7, 100, true), 100);
  EXPECT_EQ(stage_keep_count(180, 0.0, 100, true), 100) << "no keep: the budget";
  EXPECT_EQ(stage_keep_count(50, 0.0, 100, true), 50);
}

TEST(StagedSelection, SharesSplitOneBudgetAsBruteForce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 30);
    const int stages = 2 + static_cast<int>(rng() % 2);
    std::vector<RandomHead> heads;
    heads.push_back(random_head(rng, T));
    for (int i = 1; i < stages; ++i) {
      RandomHead h = random_head(rng, T);
      h.pos = heads[0].pos;  // one head, several scores
      heads.push_back(h);
    }
    const std::vector<int32_t>& pos = heads[0].pos;
    std::vector<double> shares;
    for (int i = 0; i < stages; ++i) shares.push_back(i + 1 < stages ? 0.1 * (1 + rng() % 5) : 0.0);
    const int budget = static_cast<int>(rng() % (T + 2)), recent = static_cast<int>(rng() % 4);
    std::vector<std::span<const float>> spans;
    for (const auto& h : heads) spans.emplace_back(h.score);
    const auto got = positions_of(heads[0], select_shares(spans, pos, shares, budget, 0, recent, false));
    // Brute force: the newest `recent` (at most the budget), then stage by stage its best untaken.
    std::vector<int> order(T);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return pos[a] > pos[b]; });
    std::vector<char> taken(T, 0);
    std::vector<int32_t> want;
    for (int j = 0; j < std::min(recent, T); ++j) {
      taken[order[j]] = 1;
      if (j < budget) want.push_back(pos[order[j]]);
    }
    const int F = std::max(0, std::min(budget - static_cast<int>(want.size()), T - std::min(recent, T)));
    int left = F;
    for (int i = 0; i < stages; ++i) {
      int n = i + 1 < stages ? static_cast<int>(std::floor(shares[i] * F + 1e-9)) : left;
      n = std::min(n, left);
      std::vector<int> c;
      for (int t = 0; t < T; ++t)
        if (!taken[t]) c.push_back(t);
      std::sort(c.begin(), c.end(), [&](int a, int b) { return better(heads[i].score[a], pos[a], heads[i].score[b], pos[b]); });
      for (int j = 0; j < n && j < static_cast<int>(c.size()); ++j) taken[c[j]] = 1, want.push_back(pos[c[j]]), --left;
    }
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

TEST(MassBudget, FewestEntriesReachingTheMassAsTheReference) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int T = 1 + static_cast<int>(rng() % 30);
    std::vector<float> s(T);
    std::vector<int32_t> pos(T);
    std::vector<double> cand;
    const int recent = static_cast<int>(rng() % 4);
    for (int i = 0; i < T; ++i) {
      s[i] = std::uniform_real_distribution<float>(-0.2f, 1.0f)(rng);
      pos[i] = i;
      if (i < T - recent) cand.push_back(s[i]);
    }
    const double p = 0.05 + 0.9 * (trial % 10) / 9.0;
    EXPECT_EQ(mass_count(s, pos, 0, recent, p), reference::mass_count(cand, p)) << "trial " << trial;
  }
  const std::vector<float> zeros(5, 0.0f);
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4};
  EXPECT_EQ(mass_count(zeros, pos, 0, 0, 0.5), 0) << "no positive mass: nothing is needed";
}

// ---- Field files and mechanisms on stories260K --------------------------------------------------

std::unique_ptr<PolicyProgram> from_text(const std::string& text, const std::map<std::string, std::string>& params = {}) {
  return std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_text("test.yaml", text, params));
}

std::string number(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

// A threshold in the gap between two neighbouring values of `scores` near quantile q, so that no
// score is within float noise of it; the gap's half width is returned in `margin`.
double threshold_between(std::vector<double> scores, double q, double& margin) {
  std::sort(scores.begin(), scores.end());
  size_t best = 0;
  double gap = -1;
  const size_t centre = static_cast<size_t>(q * (scores.size() - 1));
  for (size_t i = centre > 20 ? centre - 20 : 0; i + 1 < scores.size() && i < centre + 20; ++i)
    if (scores[i + 1] - scores[i] > gap) gap = scores[i + 1] - scores[i], best = i;
  margin = gap / 2;
  return std::stod(number((scores[best] + scores[best + 1]) / 2));
}

class SelectionPolicies : public test::StoriesAttentionTest<16> {
 protected:
  static EvictionReport prefill(const PolicyProgram& policy, const std::string& budget) {
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(policy, model_->config, {Budget::parse(budget), 0});
    decoder->forward(std::span<const int>(tokens_), &engine);
    return engine.report();
  }
  // Every head's -|k| of the prompt, except the newest `window` (what a threshold judges).
  static std::vector<double> judged_knorm(int window) {
    std::vector<double> all;
    for (const auto& layer : *data_)
      for (const reference::HeadData& h : layer) {
        reference::CachedHead c;
        c.T = h.S;
        c.keys = h.keys;
        const auto s = reference::knorm_scores(c, h.d);
        all.insert(all.end(), s.begin(), s.end() - window);
      }
    return all;
  }

  // -|k| of every prompt position, [layer][kv head][position], in double.
  static std::vector<std::vector<std::vector<double>>> knorm_by_position() {
    std::vector<std::vector<std::vector<double>>> out;
    for (const auto& layer : *data_) {
      out.emplace_back();
      for (const reference::HeadData& h : layer) {
        reference::CachedHead c;
        c.T = h.S;
        c.keys = h.keys;
        out.back().push_back(reference::knorm_scores(c, h.d));
      }
    }
    return out;
  }

  // Kept sets equal, except where a Knorm cut falls inside a group of equal key norms: stories260K's
  // first layer gives a repeated token the same key norm at every position (RoPE preserves it), and
  // float (the engine) and double (the reference) order such a group by rounding noise. Then the two
  // sets may differ only by members of that group: same size, and every entry in one set but not
  // the other within `tol` of every other such entry. Returns how many heads needed the exception.
  static int expect_same_up_to_ties(const EvictionReport& got, const reference::KeptSets& want,
                                    const std::vector<std::vector<std::vector<double>>>& score, const std::string& what) {
    const double tol = 1e-5;
    int ties = 0;
    for (size_t l = 0; l < want.size(); ++l)
      for (size_t h = 0; h < want[l].size(); ++h) {
        const std::vector<int32_t> w(want[l][h].begin(), want[l][h].end());
        const std::vector<int32_t>& g = got.layers[l][h].kept_positions;
        if (g == w) continue;
        ++ties;
        EXPECT_EQ(g.size(), w.size()) << what << ": layer " << l << " head " << h;
        std::vector<int32_t> diff;
        std::set_symmetric_difference(g.begin(), g.end(), w.begin(), w.end(), std::back_inserter(diff));
        double lo = 1e300, hi = -1e300;
        for (int32_t p : diff) lo = std::min(lo, score[l][h][p]), hi = std::max(hi, score[l][h][p]);
        EXPECT_LE(hi - lo, tol * std::max(1.0, std::fabs(hi))) << what << ": layer " << l << " head " << h
                                                                << " differs beyond a tie of key norms";
      }
    return ties;
  }

};


TEST_F(SelectionPolicies, DmsAtPrefillKeepsTheWindowAndEveryTokenAtOrAboveTheThreshold) {
  for (int window : {16, 48})
    for (double q : {0.3, 0.7}) {
      double margin = 0;
      const double th = threshold_between(judged_knorm(window), q, margin);
      ASSERT_GT(margin, 1e-4) << "no clear gap for the threshold";
      for (const std::string budget : {"100%", "64"}) {
        const std::string what = "dms window " + std::to_string(window) + " threshold " + number(th) + " budget " + budget;
        const int cap = budget == "64" ? 64 : S();
        const EvictionReport r = test::prefill_report(
            *model_, tokens_, "dms", {{"threshold", number(th)}, {"sliding_window_size", std::to_string(window)}}, budget);
        const auto want = reference::dms_prefill(*data_, cap, window, th);
        if (cap == S()) {
          EXPECT_GT(test::expect_same_kept(r, want, S(), what), 0) << what;
        } else {  // the cap cuts by -|k|: ties of the first layer's repeated tokens may fall either way
          const int ties = expect_same_up_to_ties(r, want, knorm_by_position(), what);
          EXPECT_LT(ties, model_->config.n_kv_heads * 2) << what;
        }
        std::set<int> counts;
        for (const auto& layer : r.layers)
          for (const HeadReport& h : layer) {
            EXPECT_EQ(h.budget, h.kept) << what << ": the kept count is reported as the head's budget";
            EXPECT_LE(h.kept, cap) << what;
            counts.insert(h.kept);
          }
        if (budget == "100%") {
          EXPECT_GT(counts.size(), 1u) << what << ": the threshold gives every head the same count";
        }
      }
    }
}

TEST_F(SelectionPolicies, DmsWhileDecodingJudgesEachTokenOnceItLeavesTheWindow) {
  const ModelConfig& c = model_->config;
  const int window = 16;
  double margin = 0;
  const double th = threshold_between(judged_knorm(window), 0.5, margin);
  // Uncapped (the press itself); the cap while decoding is tested without ties in
  // FrozenScoresAreTheScoresAtInsertion.
  for (const std::string budget : {"100%"}) {
    const int cap = S();
    const auto policy = load_policy("dms", {{"threshold", number(th)}, {"sliding_window_size", std::to_string(window)},
                                            {"decoding", "true"}});
    const int n = test::check_decisions(*model_, tokens_, *policy, budget, 24, window,
        [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>&, int, int, int, int) {
          return reference::dms_keep(b, reference::knorm_scores(b, c.head_dim), cap, window, th);
        }, "dms decoding budget " + budget);
    EXPECT_GT(n, c.n_layers * c.n_kv_heads) << "decode steps must evict too";
  }
}

// select.score_at: insertion against a score that moves with the step: a token's frozen score is
// -|k| + slope x (its insertion step), while a recomputed one is -|k| + slope x (the step now).
TEST_F(SelectionPolicies, FrozenScoresAreTheScoresAtInsertion) {
  const ModelConfig& c = model_->config;
  const int window = 8, steps = 24;
  const double slope = 0.25;
  double margin = 0;
  const double th = threshold_between(judged_knorm(window), 0.5, margin);
  const std::string text =
      "name: frozen\nabout: x\nparams:\n  th: {float: 0}\n  slope: {float: 0}\n"
      "  when: {enum: [eviction, insertion], default: insertion}\n"
      "protect: {recent: 8}\nrun: {prefill: true, decode_every: 1}\nselect: {threshold: th, score_at: when}\n"
      "score: |\n  score[t] = -key_norm[t] + slope * decode_step + 0.001 * pos[t]\n";
  const int S0 = S();
  double closest = 1e9;
  auto scores = [&](const reference::CachedHead& b, int step, bool frozen) {
    std::vector<double> s = reference::knorm_scores(b, c.head_dim);
    for (int t = 0; t < b.T; ++t) {
      // 0.001 x position orders the first layer's equal key norms of repeated tokens (see
      // expect_same_up_to_ties) by more than float noise, so that the cap can be compared exactly.
      s[t] += slope * (frozen ? std::max(0, b.pos[t] - S0 + 1) : step) + 0.001 * b.pos[t];
      closest = std::min(closest, std::fabs(s[t] - th));
    }
    return s;
  };
  int differ = 0;
  for (const char* when : {"insertion", "eviction"})
    for (const std::string budget : {"100%", "40"}) {
      const bool frozen = std::string(when) == "insertion";
      const int cap = budget == "40" ? 40 : S0;
      const auto policy = from_text(text, {{"th", number(th)}, {"slope", number(slope)}, {"when", when}});
      int capped = 0;
      const int n = test::check_decisions(*model_, tokens_, *policy, budget, steps, window,
          [&](const reference::CachedHead& b, const std::vector<reference::QueryRow>&, int, int, int, int step) {
            const auto want = reference::dms_keep(b, scores(b, step, frozen), cap, window, th);
            differ += want != reference::dms_keep(b, scores(b, step, !frozen), cap, window, th);
            capped += static_cast<int>(want.size()) == cap;
            return want;
          }, std::string("score_at ") + when + " budget " + budget);
      EXPECT_GT(n, 0);
      if (cap == 40) {
        EXPECT_GT(capped, 0) << "the cap never bound";
      }
    }
  EXPECT_GT(differ, 0) << "frozen and recomputed scores never disagreed: the test cannot tell them apart";
  EXPECT_GT(closest, 1e-4) << "a score within float noise of the threshold";
}

TEST_F(SelectionPolicies, ComposedSnapKVThenKnormKeepsTheReferenceSets) {
  struct Case { double r1, r2; std::string budget; int cap; };
  for (const Case& k : {Case{0.3, 0.2, "100%", S()}, Case{0.5, 0.25, "100%", S()}, Case{0.3, 0.2, "40", 40}}) {
    const std::string what = "composed " + number(k.r1) + " " + number(k.r2) + " " + k.budget;
    const EvictionReport r = test::prefill_report(
        *model_, tokens_, "composed",
        {{"window", "16"}, {"snapkv_compression_ratio", number(k.r1)}, {"knorm_compression_ratio", number(k.r2)}}, k.budget);
    // Stage 2 cuts by -|k|: the first layer's ties of repeated tokens may fall either way.
    const int ties = expect_same_up_to_ties(r, reference::composed_snapkv_knorm(*data_, k.cap, 5, k.r1, k.r2),
                                            knorm_by_position(), what);
    EXPECT_LT(ties, model_->config.n_kv_heads * 2) << what;
  }
  // The order matters: Knorm alone at the composed press's final count keeps another set.
  const int n2 = static_cast<int>(std::floor(std::floor(S() * 0.7) * 0.8));
  EXPECT_NE(reference::composed_snapkv_knorm(*data_, S(), 5, 0.3, 0.2), reference::knorm(*data_, n2));
}

// "The top share of the budget by one score, the rest by another": SnapKV's window attention takes
// half of each head's free budget, Knorm the rest among what SnapKV left (share stages).
TEST_F(SelectionPolicies, ShareStagesSplitTheBudgetBetweenScores) {
  const auto policy = from_text(
      "name: s\nabout: x\nobserve: {window: 16}\nprotect: {recent: 16}\n"
      "select: {stages: [{score: score, share: 0.5}, {score: knorm}]}\n"
      "scores:\n  knorm: |\n    score[t] = -key_norm[t]\n"
      "score: |\n  score[t] = if(t < T - W, mean(h: sum(q: A[h, q, t])), 0)\n");
  const int budget = 48;
  const EvictionReport r = prefill(*policy, std::to_string(budget));
  reference::KeptSets want(data_->size());
  const auto knorm = knorm_by_position();
  for (size_t l = 0; l < data_->size(); ++l)
    for (size_t hh = 0; hh < (*data_)[l].size(); ++hh) {
      const reference::HeadData& h = (*data_)[l][hh];
      const int n = h.S - 16, F = budget - 16;
      std::vector<double> a(n, 0.0);
      for (int g = 0; g < h.G; ++g)
        for (int q = 0; q < h.W; ++q)
          for (int t = 0; t < n; ++t) a[t] += h.window_attention[(static_cast<size_t>(g) * h.W + q) * h.S + t] / h.G;
      std::vector<int> idx(n);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return a[x] > a[y]; });
      std::vector<int> kept(idx.begin(), idx.begin() + F / 2);
      std::vector<int> rest(idx.begin() + F / 2, idx.end());
      std::stable_sort(rest.begin(), rest.end(), [&](int x, int y) {
        return knorm[l][hh][x] != knorm[l][hh][y] ? knorm[l][hh][x] > knorm[l][hh][y] : x < y;
      });
      kept.insert(kept.end(), rest.begin(), rest.begin() + (F - F / 2));
      for (int t = n; t < h.S; ++t) kept.push_back(t);
      std::sort(kept.begin(), kept.end());
      want[l].push_back(kept);
    }
  const int ties = expect_same_up_to_ties(r, want, knorm, "share stages");
  EXPECT_LT(ties, model_->config.n_kv_heads * 2);
  // Not the same as either score alone.
  EXPECT_NE(want, reference::knorm(*data_, budget));
}

TEST_F(SelectionPolicies, ModelScopeIsOneTopKOverEveryLayerAndHead) {
  const auto policy = from_text(
      "name: m\nabout: x\nprotect: {recent: 4}\nselect: {scope: model}\nscore: |\n  score[t] = -key_norm[t]\n");
  const EvictionReport r = prefill(*policy, "40");
  EXPECT_GT(test::expect_same_kept(r, reference::knorm_model_wide(*data_, 40, 4), S(), "scope model"), 0);
  std::set<int> counts;
  int total = 0;
  for (const auto& layer : r.layers)
    for (const HeadReport& h : layer) {
      EXPECT_EQ(h.budget, h.kept);
      counts.insert(h.kept);
      total += h.kept;
    }
  EXPECT_EQ(total, 40 * model_->config.n_layers * model_->config.n_kv_heads) << "the pool is the total budget";
  EXPECT_GT(counts.size(), 1u) << "every head kept the same count: the pool is not exercised";
}

TEST_F(SelectionPolicies, MassAllocationGivesEachLayerTheTokensItsAttentionMassNeeds) {
  const double p = 0.9;
  const auto policy = from_text(
      "name: m\nabout: x\nobserve: {window: 16}\nprotect: {recent: 16}\nselect: {layer_allocation: mass, mass: 0.9}\n"
      "score: |\n  score[t] = mean(h: sum(q: A[h, q, t]))\n");
  const EvictionReport r = prefill(*policy, "100%");
  reference::KeptSets want(data_->size());
  std::set<int> budgets;
  for (size_t l = 0; l < data_->size(); ++l) {
    std::vector<std::vector<double>> score;
    double counts = 0;
    for (const reference::HeadData& h : (*data_)[l]) {
      std::vector<double> s(h.S, 0.0);
      for (int g = 0; g < h.G; ++g)
        for (int q = 0; q < h.W; ++q)
          for (int t = 0; t < h.S; ++t) s[t] += h.window_attention[(static_cast<size_t>(g) * h.W + q) * h.S + t] / h.G;
      counts += reference::mass_count(std::vector<double>(s.begin(), s.end() - 16), p);
      score.push_back(s);
    }
    const int budget = std::min(S(), 16 + static_cast<int>(std::ceil(counts / score.size())));
    budgets.insert(budget);
    for (const auto& s : score) {
      std::vector<int> idx(S() - 16);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return s[a] > s[b]; });
      idx.resize(budget - 16);
      for (int t = S() - 16; t < S(); ++t) idx.push_back(t);
      std::sort(idx.begin(), idx.end());
      want[l].push_back(idx);
    }
    for (const HeadReport& h : r.layers[l]) EXPECT_EQ(h.budget, budget) << "layer " << l;
  }
  EXPECT_GT(test::expect_same_kept(r, want, S(), "layer_allocation mass"), 0);
  EXPECT_GT(budgets.size(), 1u) << "every layer needed the same count: the statistic is not exercised";
}

// --budget full turns a threshold off, at prefill and while decoding.
TEST_F(SelectionPolicies, FullBudgetTurnsTheThresholdOff) {
  const auto policy = load_policy("dms", {{"sliding_window_size", "4"}, {"threshold", "0"}, {"decoding", "true"}});
  auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, model_->config, {Budget::parse("full"), 0});
  const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
  for (int step = 0; step < 3; ++step) {
    const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
  }
  // As for every policy with decode triggers, a head above the prompt's length is cut back to it, by
  // rank; the threshold (0 would evict every -|k| < 0 outside the window) evicts nothing more.
  EXPECT_EQ(decoder->cache().length(0, 0), tokens_.size());
  const EvictionReport dms = test::prefill_report(*model_, tokens_, "dms", {{"sliding_window_size", "4"}, {"threshold", "0"}}, "100%");
  EXPECT_EQ(dms.layers[0][0].kept, 4) << "with a budget the same threshold keeps the window only";
}

// The frozen scores are engine state aligned with the cache: one per entry through every compaction
// and append while decode triggers read them, none after prefill without triggers.
TEST_F(SelectionPolicies, FrozenScoresStayAlignedWithTheCache) {
  for (const char* decoding : {"true", "false"}) {
    const auto policy = load_policy("dms", {{"sliding_window_size", "16"}, {"decoding", decoding}});
    auto decoder = make_cpu_decoder(*model_, {.threads = 1, .kv_type = KvType::F32});
    EvictionEngine engine(*policy, model_->config, {Budget::parse("100%"), 0});
    const std::vector<float>* logits = &decoder->forward(std::span<const int>(tokens_), &engine);
    for (int step = 0; step < 6; ++step) {
      const int next = static_cast<int>(std::max_element(logits->begin(), logits->end()) - logits->begin());
      logits = &decoder->forward(std::span<const int>(&next, 1), &engine);
      for (int l = 0; l < model_->config.n_layers; ++l)
        for (int h = 0; h < model_->config.n_kv_heads; ++h) {
          const std::vector<size_t> lengths = engine.aligned_state_lengths(l, h);
          if (std::string(decoding) == "true") {
            const auto length = static_cast<size_t>(decoder->cache().length(l, h));
            EXPECT_EQ(lengths, std::vector<size_t>{length}) << "step " << step;
          } else {
            EXPECT_TRUE(lengths.empty()) << "without decode triggers nothing reads frozen scores";
          }
        }
    }
  }
}

}  // namespace
}  // namespace kvevict
