// Parser and checker unit tests: precedence, shapes, folding, sharing, error recovery.
#include <gtest/gtest.h>

#include <cmath>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl {
namespace {

using test::Checked;

Checked check(const std::string& text, ProgramContext ctx = ProgramContext::Score, std::vector<ParamBinding> params = {}) {
  return test::check_program_text("test.dsl", text, ctx, std::move(params));
}

// Evaluates a score program over key_norm = kn (T = kn.size()).
std::vector<float> run(const LoweredProgram& p, std::vector<float> kn) {
  EvalInputs in;
  in.ext = {.g = 1, .h = 1, .q = 0, .d = 1, .t = static_cast<int>(kn.size())};
  in.scalars[static_cast<int>(ScalarSignal::T)] = static_cast<float>(kn.size());
  HeadSignals h;
  h.tensors[static_cast<int>(TensorSignal::KeyNorm)] = kn.data();
  in.heads.push_back(h);
  std::vector<float> out(kn.size());
  evaluate_scores(p, in, out.data());
  return out;
}

TEST(DslParser, PrecedenceAndAssociativity) {
  auto c = check("score[t] = 2 + 3 * 4 ^ 2 ^ 0.5 - -1");  // 2 + 3 * 4^(2^0.5) + 1
  ASSERT_EQ(c.errors, "");
  ASSERT_EQ(c.program.nodes[c.program.output].op, NodeOp::Const) << "constants fold";
  EXPECT_NEAR(c.program.nodes[c.program.output].value, 2 + 3 * std::pow(4.0, std::pow(2.0, 0.5)) + 1, 1e-4);
  auto d = check("score[t] = if(1 < 2 and not (3 <= 2) or false, 7, 8)");
  ASSERT_EQ(d.errors, "");
  EXPECT_EQ(d.program.nodes[d.program.output].value, 7.0f);
}

TEST(DslParser, CommentsSemicolonsAndContinuationLines) {
  auto c = check("a[t] = key_norm[t] # the norm\nb[t] = (a[t] +\n  1); score[t] = b[t] * 2\n");
  ASSERT_EQ(c.errors, "");
  EXPECT_EQ(run(c.program, {1, 2}), (std::vector<float>{4, 6}));
}

TEST(DslChecker, SharedSubexpressionsAreComputedOnce) {
  auto c = check("m[t] = abs(key_norm[t])\nn[t] = abs(key_norm[t])\nscore[t] = m[t] + n[t]");
  ASSERT_EQ(c.errors, "");
  int abs_nodes = 0;
  for (const auto& n : c.program.nodes) abs_nodes += n.op == NodeOp::Unary && n.unary == UnaryFn::Abs;
  EXPECT_EQ(abs_nodes, 1);
}

TEST(DslChecker, ShapesFollowIndicesAndReductions) {
  auto c = check("m[h, t] = mean(q: A[h, q, t])\ns = sum(h, t: m[h, t])\nscore[t] = m[h, t]");
  EXPECT_NE(c.errors.find("axis 'h' is not bound here"), std::string::npos) << c.errors;
  auto d = check("m[h, t] = mean(q: A[h, q, t])\ns = sum(h, t: m[h, t])\nscore[t] = mean(h: m[h, t]) / s");
  ASSERT_EQ(d.errors, "");
  EXPECT_EQ(d.program.nodes[d.program.output].shape, kAxisT);
}

TEST(DslChecker, EnumParametersFoldToTheChosenBranch) {
  ParamBinding pool{"pool", Type::Enum, 1, {"avg", "max"}};
  auto c = check("score[t] = if(pool == \"avg\", key_norm[t], -key_norm[t])", ProgramContext::Score, {pool});
  ASSERT_EQ(c.errors, "");
  EXPECT_EQ(run(c.program, {1, 2}), (std::vector<float>{-1, -2}));
}

TEST(DslChecker, ReportsEveryBrokenDefinition) {
  auto c = check("a[t] = (1 +\nb[t] = nope[t]\nc[t] = key_norm[t] +* 2\nscore[t] = a[t] + b[t] + c[t]");
  EXPECT_NE(c.errors.find("test.dsl:1:"), std::string::npos) << c.errors;
  EXPECT_NE(c.errors.find("test.dsl:2:8: error: unknown tensor 'nope'"), std::string::npos) << c.errors;
  EXPECT_NE(c.errors.find("test.dsl:3:21: error: expected an operand"), std::string::npos) << c.errors;
  EXPECT_EQ(c.errors.find("test.dsl:4"), std::string::npos) << "no follow-on errors: " << c.errors;
}

TEST(DslChecker, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "score[t] = " + std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(check(deep).errors.find("nested too deeply"), std::string::npos);
  std::string chain = "score[t] = 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_NE(check(chain).errors.find("nested too deeply"), std::string::npos);
}

TEST(DslChecker, LayerWeightHasAxisG) {
  auto c = check("x = sum(g, h, q, t: A[g, h, q, t])\nlayer_weight = x * budget", ProgramContext::LayerWeight);
  EXPECT_EQ(c.errors, "");
  auto d = check("layer_weight = sum(g, t: key_norm[t])", ProgramContext::LayerWeight);
  EXPECT_NE(d.errors.find("'key_norm' has axes [g, t]"), std::string::npos) << d.errors;
}

TEST(DslInterpreter, WindowPaddingRule) {
  // mean pools count the padding (divide by the kernel size); max pools skip it.
  auto c = check("score[t] = mean(k in -1 .. 1: key_norm[t + k])");
  ASSERT_EQ(c.errors, "");
  auto r = run(c.program, {3, 6, 9});
  EXPECT_FLOAT_EQ(r[0], 3.0f);  // (0 + 3 + 6) / 3
  EXPECT_FLOAT_EQ(r[1], 6.0f);
  EXPECT_FLOAT_EQ(r[2], 5.0f);  // (6 + 9 + 0) / 3
  auto m = check("score[t] = max(k in -1 .. 1: key_norm[t + k])");
  EXPECT_EQ(run(m.program, {-3, -6, -9}), (std::vector<float>{-3, -3, -6}));
  auto s = check("score[t] = sum(k in 1 .. 2: key_norm[t - k])");  // looks back
  EXPECT_EQ(run(s.program, {1, 2, 4}), (std::vector<float>{0, 1, 3}));
}

TEST(DslInterpreter, TokenReductionsAndNormalise) {
  auto c = check("p[t] = normalise(key_norm[t])\ne = entropy(t: p[t])\nscore[t] = p[t] + e");
  ASSERT_EQ(c.errors, "");
  auto r = run(c.program, {1, 1, 2});
  const double e = -(0.25 * std::log(0.25) * 2 + 0.5 * std::log(0.5));
  EXPECT_NEAR(r[0], 0.25 + e, 1e-6);
  EXPECT_NEAR(r[2], 0.5 + e, 1e-6);
}

TEST(DslInterpreter, NanScoresBecomeMinusInfinity) {
  auto c = check("score[t] = log(key_norm[t] - 2)");
  auto r = run(c.program, {1, 3});
  EXPECT_TRUE(std::isinf(r[0]) && r[0] < 0);
  EXPECT_FLOAT_EQ(r[1], 0.0f);
}

TEST(DslInterpreter, MissingSignalIsARuntimeError) {
  auto c = check("score[t] = value_norm[t]");
  EXPECT_THROW(run(c.program, {1}), RuntimeError);
}

TEST(DslPolicyFile, OverridesAreTypeAndRangeChecked) {
  const std::string text = "name: p\nabout: x\nparams:\n  w: {int: 4, min: 1, max: 8}\n  b: {bool: true}\n"
                           "observe: {window: w}\nscore: |\n  score[t] = 1\n";
  EXPECT_EQ(compile_policy_text("p.yaml", text, {{"w", "8"}}).desc.window, 8);
  EXPECT_EQ(compile_policy_text("p.yaml", text, {{"w", "8"}}).desc.params.at("w"), "8");
  for (auto [k, v] : std::vector<std::pair<std::string, std::string>>{{"w", "9"}, {"w", "2.5"}, {"w", "x"}, {"b", "1"}, {"nope", "1"}}) {
    try {
      compile_policy_text("p.yaml", text, {{k, v}});
      ADD_FAILURE() << k << "=" << v << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("p.yaml: error: "), std::string::npos) << e.what();
    }
  }
}

TEST(DslPolicyFile, NegativeMinimumIsKept) {
  // A declared minimum below 0 must hold as written (it was once raised to 0 silently).
  const std::string text = "name: p\nabout: x\nparams:\n  c: {float: 0.5, min: -1, max: 1}\n"
                           "  f: {fraction: 0.5, min: -3}\nscore: |\n  score[t] = c + f\n";
  EXPECT_EQ(compile_policy_text("p.yaml", text, {{"c", "-0.75"}}).desc.params.at("c"), "-0.75");
  EXPECT_THROW(compile_policy_text("p.yaml", text, {{"c", "-1.5"}}), UsageError);
  EXPECT_THROW(compile_policy_text("p.yaml", text, {{"f", "-0.1"}}), UsageError) << "a fraction stays within [0, 1]";
}

TEST(DslPolicyFile, PromptLengthSettings) {
  const std::string text = "name: p\nabout: x\nparams:\n  r: {fraction: 0.1}\n"
                           "protect: {first: 2, recent: \"max(0, floor(r * prompt_len) - 2)\"}\nscore: |\n  score[t] = 1\n";
  CompiledPolicy c = compile_policy_text("p.yaml", text);
  EXPECT_TRUE(c.desc.depends_on_prompt_len);
  EXPECT_EQ(evaluate_setting(c.protect_recent, 1000), 98.0);
  EXPECT_EQ(evaluate_setting(c.protect_recent, 10), 0.0);
}

}  // namespace
}  // namespace kvevict::dsl
