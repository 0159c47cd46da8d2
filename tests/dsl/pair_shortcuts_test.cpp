// The token-pair shortcuts (dsl/token_pairs.h): the last/first index where a condition holds
// scans blocks of t and stops early; a sum over s of a value selected at one column per row
// evaluates that column only. Each shortcut must give the tiled evaluation's bits: the reference
// is the same program with the pattern defeated (`t * one[t]`, one = n / n = 1 exactly, is not
// the bare index), which takes the tiled path. The tests also check which path each exit takes,
// so they fail if a shortcut silently stops applying.
#include <gtest/gtest.h>

#include <string>

#include "dsl/pair_keys_test.h"
#include "dsl/program_check_test.h"
#include "dsl/token_pairs.h"

namespace kvevict::dsl {
namespace {

using test::Keys;
using test::random_keys;

LoweredProgram compiled(const std::string& text) {
  auto c = test::check_program_text("shortcut.dsl", text);
  EXPECT_EQ(c.errors, "") << text;
  return c.program;
}

// The kinds of the program's token-pair exits, in node order.
std::vector<interp::PairExitKind> exit_kinds(const LoweredProgram& p) {
  std::vector<interp::PairExitKind> kinds;
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (interp::is_pair_exit(p, static_cast<int>(i))) kinds.push_back(interp::pair_exit_kind(p, static_cast<int>(i)));
  return kinds;
}

const std::string kCosine =
    "n[t] = sqrt(sum(d: K[d, t] * K[d, t])) + 1e-8\n"
    "one[t] = n[t] / n[t]\n"
    "u[d, t] = K[d, t] / n[t]\n"
    "c[s, t] = if(s == t, 0, sum(d: u[d, s] * u[d, t]))\n";

// `last[s] = REDUCER(t: if(c[s, t] > THRESHOLD, INDEX, OTHER))`, scored so that every row's
// result reaches the output.
std::string index_program(const std::string& reducer, const std::string& threshold, const std::string& index,
                          const std::string& other) {
  return kCosine + "last[s] = " + reducer + "(t: if(c[s, t] > " + threshold + ", " + index + ", " + other + "))\n" +
         "score[t] = mean(s: if(t == last[s], 1, 0)) + sum(s: last[s] * 0.001)\n";
}

using interp::PairExitKind;

TEST(PairShortcuts, LastAndFirstIndexScansEqualTheTiledEvaluation) {
  int tested = 0;
  for (int T : {1, 2, 127, 128, 129, 300, 1000})
    for (const char* threshold : {"0.5", "0.97", "-2", "2"})  // common, rare, every, no partner
      for (auto [reducer, other] : {std::pair{"max", "0"}, std::pair{"max", "-1"}, std::pair{"max", "5"}, std::pair{"min", "0"},
                                    std::pair{"min", "1000000"}, std::pair{"min", "150"}}) {
        const Keys keys = random_keys(T, 6, 10 + T);
        const LoweredProgram fast = compiled(index_program(reducer, threshold, "t", other));
        const LoweredProgram slow = compiled(index_program(reducer, threshold, "t * one[t]", other));
        ASSERT_EQ(exit_kinds(fast).front(), PairExitKind::IndexScan) << reducer << " " << other;
        ASSERT_EQ(exit_kinds(slow).front(), PairExitKind::Tiles);
        EXPECT_EQ(test::run_on_keys(fast, keys), test::run_on_keys(slow, keys))
            << "T " << T << " threshold " << threshold << " " << reducer << " other " << other;
        ++tested;
      }
  EXPECT_EQ(tested, 7 * 4 * 6);
}

TEST(PairShortcuts, PointSumEqualsTheTiledEvaluation) {
  for (int T : {1, 3, 64, 65, 300, 1000}) {
    const Keys keys = random_keys(T, 5, 40 + T);
    for (const char* column : {"last[s]", "last[s] + 0.5", "last[s] - 3", "T - 1 - last[s]"}) {
      // The column index of a row: the last partner above 0.5, or off the grid (a fraction, negative,
      // or at the far end): such a row adds nothing.
      const std::string body = kCosine + "last[s] = max(t: if(c[s, t] > 0.5, t, 0))\ncol[s] = " + column + "\n";
      for (const char* form : {"sum(s: if(T0 == col[s], c[s, t] + u[0, s], 0))", "mean(s: if(col[s] == T0, c[s, t], 0))"}) {
        std::string f = form, g = form;
        f.replace(f.find("T0"), 2, "t");
        g.replace(g.find("T0"), 2, "t * one[t]");
        // d is not a free axis here: u[0, s] is not valid DSL, so read channel 0 through a definition.
        auto fix = [](std::string x) {
          const size_t at = x.find("u[0, s]");
          if (at != std::string::npos) x.replace(at, 7, "u0[s]");
          return x;
        };
        const std::string head = body + "u0[t] = sum(d: if(d == 0, u[d, t], 0))\n";
        const LoweredProgram fast = compiled(head + "score[t] = " + fix(f) + "\n");
        const LoweredProgram slow = compiled(head + "score[t] = " + fix(g) + "\n");
        ASSERT_EQ(exit_kinds(fast).back(), PairExitKind::PointSum) << form;
        ASSERT_EQ(exit_kinds(slow).back(), PairExitKind::Tiles) << form;
        EXPECT_EQ(test::run_on_keys(fast, keys), test::run_on_keys(slow, keys)) << "T " << T << " " << column << " " << form;
      }
    }
  }
}

// The scan reads its condition in place (scan_block): a condition broadcast along t (one value per
// row of s: every column or none), an exit that keeps another axis (d: one scan per channel), a
// comparison with the scalar on either side, and the self-pair mask (a view off the diagonal).
TEST(PairShortcuts, IndexScansOfBroadcastConditionsAndExtraAxesEqualTheTiledEvaluation) {
  const std::vector<std::string> scans = {
      "last[s] = max(t: if(u0[s] > 0, INDEX, 3))\nscore[t] = mean(s: if(t == last[s], 1, 0)) + sum(s: last[s] * 0.001)\n",
      "last[s] = min(t: if(u0[s] < 0, INDEX, 7))\nscore[t] = mean(s: if(t == last[s], 1, 0)) + sum(s: last[s] * 0.001)\n",
      "per[d, s] = max(t: if(u[d, s] * u[d, t] > 0.3, INDEX, 0))\nlast[s] = sum(d: per[d, s])\n"
      "score[t] = mean(s: if(t == last[s], 1, 0)) + sum(s: last[s] * 0.001)\n",
      "per[d, s] = min(t: if(u[d, s] * u[d, t] < -0.4, INDEX, 50))\nlast[s] = sum(d: per[d, s])\n"
      "score[t] = sum(s: last[s] * 0.001)\n",
      // The scalar on the left of the comparison, and the self-pair mask written t == s.
      "last[s] = max(t: if(0.5 < c[s, t], INDEX, 0))\nscore[t] = mean(s: if(t == last[s], 1, 0)) + sum(s: last[s] * 0.001)\n",
      "e[s, t] = if(t == s, 0, sum(d: u[d, s] * u[d, t]))\nlast[s] = min(t: if(0.2 >= e[s, t], INDEX, 9))\n"
      "score[t] = sum(s: last[s] * 0.001)\n"};
  for (int T : {1, 33, 100, 257})
    for (const std::string& scan : scans) {
      const Keys keys = random_keys(T, 4, 70 + T);
      std::string f = scan, g = scan;
      f.replace(f.find("INDEX"), 5, "t");
      g.replace(g.find("INDEX"), 5, "t * one[t]");
      const std::string head = kCosine + "u0[t] = sum(d: if(d == 0, u[d, t], 0))\n";
      const LoweredProgram fast = compiled(head + f), slow = compiled(head + g);
      ASSERT_EQ(exit_kinds(fast).front(), PairExitKind::IndexScan) << scan;
      ASSERT_EQ(exit_kinds(slow).front(), PairExitKind::Tiles) << scan;
      EXPECT_EQ(test::run_on_keys(fast, keys), test::run_on_keys(slow, keys)) << "T " << T << "\n" << scan;
    }
}

TEST(PairShortcuts, ExitsThatReadOtherColumnsStayTiled) {
  // normalise and token windows read other columns of t, and the complement form selects every
  // column but one: none of them may take a shortcut.
  EXPECT_EQ(exit_kinds(compiled(kCosine + "x[s, t] = normalise(c[s, t])\nlast[s] = max(t: if(x[s, t] > 0.01, t, 0))\n"
                                          "score[t] = sum(s: if(t == last[s], 1, 0))\n")),
            (std::vector<PairExitKind>{PairExitKind::Tiles, PairExitKind::PointSum}));
  EXPECT_EQ(exit_kinds(compiled(kCosine + "last[s] = max(t: if(c[s, t] > 0.5, t, 0))\n"
                                          "score[t] = mean(s: if(t == last[s], 0, c[s, t]))\n")),
            (std::vector<PairExitKind>{PairExitKind::IndexScan, PairExitKind::Tiles}));
  EXPECT_EQ(exit_kinds(compiled(kCosine + "last[s] = max(t: if(c[s, t] > 0.5, t + 1, 0))\nscore[t] = last[t]\n")),
            (std::vector<PairExitKind>{PairExitKind::Tiles}));
}

}  // namespace
}  // namespace kvevict::dsl
