// The model axis c (extent n_embd, core/engine/signals.h), the signal hidden[c, t], tables over c
// (dsl/table_data.h) and gelu(): lowered programs against direct double computations, the
// checker's and the table loader's refusals (exact messages), and the geometry check of a table
// over c. The error golden file is tests/dsl/golden/45_model_axis.yaml.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "core/util/error.h"
#include "dsl/program_check_test.h"
#include "dsl/checker.h"
#include "dsl/compiled_program.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"
#include "dsl/policy_dir_test.h"
#include "dsl/policy_file.h"

namespace kvevict::dsl {
namespace {

namespace fs = std::filesystem;

using test::Checked;

Checked check(const std::string& text) {
  return test::check_program_text("m.dsl", text);
}

class ModelAxis : public test::PolicyDirTest {
 protected:
  // Compiles a policy with the given `tables:` body and score; returns the error's first line with
  // the folder replaced by DIR ("" if none).
  std::string compile(const std::string& tables, const std::string& score) {
    return strip(compile_text("name: p\nabout: a\ntables:\n" + tables + "score: |\n  " + score + "\n"));
  }
  std::string strip(std::string m) const {
    m = m.substr(0, m.find('\n'));
    for (size_t i; (i = m.find(dir_.string())) != std::string::npos;) m.replace(i, dir_.string().size(), "DIR");
    return m;
  }
};

// KVzap's linear form: sum over c of a [layer, kv_head, c] table times hidden[c, t], plus a bias.
TEST_F(ModelAxis, ALinearScorerOverCEqualsTheDoubleSum) {
  const int L = 2, H = 3, C = 5, T = 7;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> w(L * H * C), b(L * H);
  std::string wt, bt;
  for (int r = 0; r < L * H; ++r) {
    for (int c = 0; c < C; ++c) {
      w[r * C + c] = std::round(u(rng) * 1e4) / 1e4;
      wt += std::to_string(w[r * C + c]) + (c + 1 < C ? "\t" : "\n");
    }
  }
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      b[l * H + h] = std::round(u(rng) * 1e4) / 1e4;
      bt += std::to_string(b[l * H + h]) + (h + 1 < H ? " " : "\n");
    }
  write("w.tsv", wt);
  write("b.tsv", bt);
  ASSERT_EQ(compile("  w: {file: w.tsv, axes: [layer, kv_head, c], shape: [2, 3, 5]}\n"
                    "  b: {file: b.tsv, axes: [layer, kv_head], shape: [2, 3]}\n",
                    "score[t] = sum(c: w[layer, kv_head, c] * hidden[c, t]) + b[layer, kv_head]"),
            "");
  EXPECT_TRUE(compiled_.desc.needs(TensorSignal::HiddenState));
  EXPECT_EQ(compiled_.tables[0]->shape_text(), "[layer 2, kv_head 3, c 5]");
  InterpretedPolicy policy(std::move(compiled_));
  std::vector<float> x(C * T);  // [c][t]
  for (float& v : x) v = static_cast<float>(u(rng));
  ScoreInputs in;
  in.n_layers = L;
  in.n_kv_heads = H;
  in.head_dim = 4;
  in.n_embd = C;
  in.T = T;
  in.set_signal(TensorSignal::HiddenState, x.data());
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      in.layer = l;
      in.kv_head = h;
      std::vector<float> out(T);
      policy.score(in, false, out.data());
      for (int t = 0; t < T; ++t) {
        double want = b[l * H + h];
        for (int c = 0; c < C; ++c) want += double(float(w[(l * H + h) * C + c])) * x[c * T + t];
        EXPECT_NEAR(out[t], want, 1e-5 * (1 + std::fabs(want))) << l << " " << h << " " << t;
      }
    }
  EXPECT_EQ(policy.check_geometry({.n_layers = 2, .n_kv_heads = 3, .head_dim = 4, .n_embd = 5}), "");
  EXPECT_EQ(policy.check_geometry({.n_layers = 2, .n_kv_heads = 3, .head_dim = 4, .n_embd = 0}), "") << "n_embd 0: not checked";
  EXPECT_EQ(strip(policy.check_geometry({.n_layers = 2, .n_kv_heads = 3, .head_dim = 4, .n_embd = 6})),
            "policy 'p' (" + (dir_ / "p.yaml").string().replace(0, dir_.string().size(), "DIR") +
                "): table 'w' (DIR/w.tsv) has shape [layer 2, kv_head 3, c 5], but the model has n_embd = 6");
}

// A program over c alone (a definition over c, a reduction over t that keeps c) and a table over
// d and c together: the layout [d][c] of the table and [c][t] of the signal.
TEST_F(ModelAxis, DefinitionsOverCAndATableOverDAndC) {
  write("m.tsv", "1 2 3\n4 5 6\n");  // [d 2, c 3]
  ASSERT_EQ(compile("  m: {file: m.tsv, axes: [d, c], shape: [2, 3]}\n",
                    "mu[c] = mean(t: hidden[c, t])\n  score[t] = sum(d, c: m[d, c] * K[d, t] * (hidden[c, t] - mu[c]))"),
            "");
  InterpretedPolicy policy(std::move(compiled_));
  const int T = 4, C = 3, D = 2;
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 5, 0.5f, 0.25f, 2, 8};  // [c][t]
  std::vector<float> k = {1, -1, 2, 0.5f, 3, 1, -2, 1};                  // [d][t]
  ScoreInputs in;
  in.head_dim = D;
  in.n_embd = C;
  in.T = T;
  in.set_signal(TensorSignal::HiddenState, x.data());
  in.set_signal(TensorSignal::Keys, k.data());
  std::vector<float> out(T);
  policy.score(in, false, out.data());
  for (int t = 0; t < T; ++t) {
    double want = 0;
    for (int d = 0; d < D; ++d)
      for (int c = 0; c < C; ++c) {
        double mu = 0;
        for (int s = 0; s < T; ++s) mu += x[c * T + s] / double(T);
        want += (d * 3 + c + 1) * double(k[d * T + t]) * (x[c * T + t] - mu);
      }
    EXPECT_NEAR(out[t], want, 1e-5 * (1 + std::fabs(want))) << t;
  }
}

// gelu: torch.nn.GELU() (approximate='none'), x * Phi(x) with the exact erf.
TEST(ModelAxisGelu, GeluIsTheExactErfForm) {
  auto c = check("score[t] = gelu(key_norm[t])");
  ASSERT_EQ(c.errors, "");
  std::vector<float> x;
  for (int i = -400; i <= 400; ++i) x.push_back(i * 0.025f);
  x.push_back(-30.0f);
  x.push_back(30.0f);
  EvalInputs in;
  in.ext = {.g = 1, .h = 1, .q = 0, .d = 1, .t = int(x.size())};
  HeadSignals h;
  h.tensors[signal_index(TensorSignal::KeyNorm)] = x.data();
  in.heads.push_back(h);
  std::vector<float> out(x.size());
  evaluate_scores(c.program, in, out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(out[i], want, 2e-7 * (1 + std::fabs(want))) << v;
  }
  EXPECT_EQ(out[0], out[0]);
  EXPECT_NEAR(out[x.size() - 2], 0.0, 1e-30) << "gelu(-30) underflows to (minus) zero";
  EXPECT_EQ(out[x.size() - 1], 30.0f);
}

// c is not a reserved word: old policies naming a definition c (nacl, cake) keep working, and the
// name hides the axis in that program.
TEST(ModelAxisNames, ADefinitionNamedCHidesTheAxis) {
  EXPECT_EQ(check("c[t] = key_norm[t] * 2\nscore[t] = c[t]").errors, "");
  const auto hidden = check("c[t] = key_norm[t]\nscore[t] = c[t] + sum(c: hidden[c, t])").errors;
  EXPECT_NE(hidden.find("'c' is not an axis here"), std::string::npos) << hidden;
}

TEST_F(ModelAxis, TableRefusalsOverC) {
  write("w.tsv", "1 2 3\n4 5 6\n");
  EXPECT_EQ(compile("  w: {file: w.tsv, axes: [c, layer], shape: [3, 2]}\n", "score[t] = key_norm[t]"),
            "DIR/p.yaml:4:30: error: table 'w': axes must be listed once each, in the order index, layer, kv_head, head, d, e, c");
  EXPECT_EQ(compile("  w: {file: w.tsv, axes: [layer, c], shape: [2, 3]}\n", "score[t] = w[layer, c]"),
            "DIR/p.yaml:6:23: error: axis 'c' is not bound here: declare it on the left side or reduce over it");
  EXPECT_EQ(compile("  w: {file: w.tsv, axes: [layer, c], shape: [2, 3]}\n", "score[t] = sum(d: w[layer, d])"),
            "DIR/p.yaml:6:30: error: index 2 of table 'w' must be 'c' (w has axes [layer, c]), found 'd'");
  EXPECT_EQ(compile("  w: {file: w.tsv, axes: [layer, c], shape: [2, 4]}\n", "score[t] = key_norm[t]"),
            "DIR/p.yaml:4:13: error: table 'w': DIR/w.tsv:1:6: row 1 has 3 numbers, the last axis of [layer 2, c 4] has 4");
}

}  // namespace
}  // namespace kvevict::dsl
