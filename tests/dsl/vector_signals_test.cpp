// The channel axis d and the vector signals K, K_pre, V: the checker's axis rules with positions,
// and the interpreter's layout ([d][t], t innermost) against sums written out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"

namespace kvevict::dsl {
namespace {

using test::Checked;

Checked check(const std::string& text) {
  return test::check_program_text("vec.dsl", text);
}

// T = 3 tokens, d = 2 channels: keys k_0 = (1, 0), k_1 = (0, 2), k_2 = (3, 4), stored [d][t].
const std::vector<float> kKeys = {1, 0, 3,   // channel 0 of tokens 0, 1, 2
                                  0, 2, 4};  // channel 1
const std::vector<float> kNorms = {1, 2, 5};

std::vector<float> run(const LoweredProgram& p) {
  EvalInputs in;
  in.ext = {.g = 1, .h = 1, .q = 0, .d = 2, .t = 3};
  HeadSignals h;
  h.tensors[signal_index(TensorSignal::Keys)] = kKeys.data();
  h.tensors[signal_index(TensorSignal::KeyNorm)] = kNorms.data();
  in.heads.push_back(h);
  std::vector<float> out(3);
  evaluate_scores(p, in, out.data());
  return out;
}

TEST(VectorSignals, ReductionsOverDAreDotProductsAndOverTAreChannelMeans) {
  auto sq = check("score[t] = sum(d: K[d, t] * K[d, t])");  // |k_t|^2
  ASSERT_EQ(sq.errors, "");
  EXPECT_EQ(run(sq.program), (std::vector<float>{1, 4, 25}));
  // KeyDiff's shape: the mean unit key (1/3 * ((1,0) + (0,1) + (0.6,0.8)) = (0.5333, 0.6)), then
  // the cosine of each key with it.
  auto cos = check(
      "anchor[d] = mean(t: K[d, t] / key_norm[t])\n"
      "n = sqrt(sum(d: anchor[d] * anchor[d]))\n"
      "score[t] = sum(d: K[d, t] * anchor[d]) / (key_norm[t] * n)");
  ASSERT_EQ(cos.errors, "");
  const double ax = (1 + 0 + 0.6) / 3, ay = (0 + 1 + 0.8) / 3, an = std::sqrt(ax * ax + ay * ay);
  const std::vector<double> want = {ax / an, ay / an, (0.6 * ax + 0.8 * ay) / an};
  const std::vector<float> got = run(cos.program);
  for (int t = 0; t < 3; ++t) EXPECT_NEAR(got[t], want[t], 1e-6) << t;
  // The channel index is a value too.
  auto idx = check("score[t] = max(d: d * K[d, t])");
  ASSERT_EQ(idx.errors, "");
  EXPECT_EQ(run(idx.program), (std::vector<float>{0, 2, 4}));
}

TEST(VectorSignals, AxesInTheWrongOrderOrUnboundAreErrorsAtTheirPosition) {
  auto order = check("score[t] = sum(d: K[t, d])");
  EXPECT_NE(order.errors.find("vec.dsl:1:21: error: index 1 of 'K' must be axis 'd'"), std::string::npos) << order.errors;
  auto unbound = check("score[t] = K[d, t]");
  EXPECT_NE(unbound.errors.find("axis 'd' is not bound"), std::string::npos) << unbound.errors;
  auto count = check("score[t] = sum(d: K[t])");
  EXPECT_NE(count.errors.find("'K' has axes [d, t] and takes 2 indices"), std::string::npos) << count.errors;
  auto left = check("x[t, d] = K[d, t]\nscore[t] = sum(d: x[d, t])");
  EXPECT_NE(left.errors.find("axes must be listed in the order h, q, d, e, c, s, t"), std::string::npos) << left.errors;
}

}  // namespace
}  // namespace kvevict::dsl
