// The fused contraction's fast paths (dsl/contraction.cpp: contract_rows4, four output rows x 16
// tokens in registers when the rows share their second operand, and contract_block, both compiled
// for AVX-512, AVX2 and the baseline, with the remaining tokens and rows by the plain loop) give
// the bits of the materialised product then the sum (a `+ 0` keeps the product alive, so it is
// computed on its own and reduced by the unfused path), on shapes around the tile edges: token
// counts below, at and past 16 and the 512-token block, row counts (rows of s in a pair tile, query heads) that are
// not multiples of 4, broadcasts along t on either side, sum and mean.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"

namespace kvevict::dsl {
namespace {

LoweredProgram checked(const std::string& text) {
  Diagnostics diag("tiles.dsl", text);
  TextOrigin origin;
  origin.block = true;
  Program p = parse_program(text, origin, diag);
  CheckOptions opt;
  opt.context = ProgramContext::Score;
  opt.had_syntax_errors = !diag.empty();
  LoweredProgram lowered = check_program(p, opt, {1, 1}, diag);
  EXPECT_EQ(diag.format(), "") << text;
  return lowered;
}

struct Head {
  int T, D, H;
  std::vector<float> k, v, a_now;  // [d][t], [d][t], [h][t]
};

Head random_head(int T, int D, int H, uint32_t seed) {
  Head head{T, D, H, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (auto* buf : {&head.k, &head.v}) {
    buf->resize(size_t(T) * size_t(D));
    for (float& x : *buf) x = n(rng);
  }
  head.a_now.resize(size_t(H) * size_t(T));
  for (float& x : head.a_now) x = std::fabs(n(rng));
  return head;
}

std::vector<float> run(const LoweredProgram& p, const Head& head) {
  EvalInputs in;
  in.ext = {.g = 1, .h = head.H, .q = 0, .d = head.D, .t = head.T};
  in.scalars[static_cast<int>(ScalarSignal::T)] = float(head.T);
  HeadSignals h;
  h.tensors[signal_index(TensorSignal::Keys)] = head.k.data();
  h.tensors[signal_index(TensorSignal::Values)] = head.v.data();
  h.tensors[signal_index(TensorSignal::CurrentAttention)] = head.a_now.data();
  in.heads.push_back(h);
  std::vector<float> out(size_t(head.T));
  evaluate_scores(p, in, out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ContractionTiles, FusedTilesAreBitIdenticalToTheMaterialisedProductAtEveryEdge) {
  // Each program contracts `PRODUCT`; the plain variant replaces it by `(PRODUCT + 0)`.
  struct Case {
    const char* product;
    const char* program;
  };
  const Case cases[] = {
      // Token pairs: rows of s (a 64-row tile, then the rest), y along t, x broadcast (no t).
      {"K[d, s] * K[d, t]", "c[s, t] = sum(d: PRODUCT)\nscore[t] = max(s: c[s, t])\n"},
      {"K[d, s] * V[d, t]", "c[s, t] = mean(d: PRODUCT)\nscore[t] = sum(s: c[s, t])\n"},
      // x along t, y broadcast; both along t; rows over query heads (H not a multiple of 4).
      {"K[d, t] * w[d]", "w[d] = mean(t: V[d, t])\nscore[t] = sum(d: PRODUCT)\n"},
      {"K[d, t] * V[d, t]", "score[t] = mean(d: PRODUCT)\n"},
      {"A_now[h, t] * K[d, t]", "x[h, t] = sum(d: PRODUCT)\nscore[t] = max(h: x[h, t])\n"},
      // Neither along t (a scalar per output row).
      {"w[d] * w[d]", "w[d] = mean(t: K[d, t])\nn = sum(d: PRODUCT)\nscore[t] = n * sum(d: K[d, t])\n"},
  };
  uint32_t seed = 11;
  int compared = 0;
  for (const Case& c : cases) {
    std::string fused = c.program, plain = c.program;
    fused.replace(fused.find("PRODUCT"), 7, c.product);
    plain.replace(plain.find("PRODUCT"), 7, std::string("(") + c.product + " + 0)");
    const LoweredProgram a = checked(fused), b = checked(plain);
    for (int T : {1, 7, 15, 16, 17, 67, 520})
      for (auto [D, H] : {std::pair{1, 1}, {5, 3}, {16, 6}}) {
        const Head head = random_head(T, D, H, seed++);
        const std::vector<float> x = run(a, head), y = run(b, head);
        EXPECT_TRUE(same_bits(x, y)) << fused << "T=" << T << " D=" << D << " H=" << H;
        ++compared;
      }
  }
  EXPECT_EQ(compared, 6 * 7 * 3);
}

// The comparison above is of bits: one ulp anywhere fails it.
TEST(ContractionTiles, TheComparisonSeesASingleUlp) {
  const Head head = random_head(67, 16, 1, 3);
  const std::vector<float> x = run(checked("score[t] = sum(d: K[d, t] * V[d, t])\n"), head);
  std::vector<float> y = x;
  y[5] = std::nextafter(y[5], 1e30f);
  EXPECT_FALSE(same_bits(x, y));
}

}  // namespace
}  // namespace kvevict::dsl
