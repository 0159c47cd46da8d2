// Property test: random well-typed expression trees, printed as DSL text, checked, lowered and run
// by the interpreter, against a direct recursive C++ evaluation of the same tree (one element at a
// time, no lowering, no sharing, no vectorisation).
#include <gtest/gtest.h>

// GCC 12 reports a false -Wrestrict inside std::string's operator+ at -O3 (GCC bug 105329).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "dsl/checker.h"
#include "dsl/interpreter.h"
#include "dsl/parser.h"

namespace kvevict::dsl {
namespace {

struct Inputs {
  int G, W, T;
  std::vector<float> A, acc, kn, vn;
  float a(int h, int q, int t) const { return A[(h * W + q) * T + t]; }
};

enum class K { Const, KeyNorm, ValueNorm, Acc, Attn, TSignal, TIndex, Add, Sub, Mul, SafeDiv, Min, Max, Neg, Abs, ExpCapped,
               LogAbs, SqrtAbs, If, ReduceQ, ReduceH, WindowLeaf };

struct Tree {
  K kind;
  unsigned shape = 0;
  float value = 0;
  Reducer red = Reducer::Sum;
  int lo = 0, hi = 0;
  bool window_on_acc = false;
  std::vector<std::unique_ptr<Tree>> kids;
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  std::unique_ptr<Tree> gen(int depth) {
    auto t = std::make_unique<Tree>();
    int choice = depth <= 0 ? pick(0, 6) : pick(0, 21);
    t->kind = static_cast<K>(choice);
    switch (t->kind) {
      case K::Const: t->value = static_cast<float>(pick(-20, 20)) / 4.0f; break;
      case K::KeyNorm: case K::ValueNorm: case K::TIndex: t->shape = kAxisT; break;
      case K::Acc: t->shape = kAxisH | kAxisT; break;
      case K::Attn: t->shape = kAxisH | kAxisQ | kAxisT; break;
      case K::TSignal: break;
      case K::Add: case K::Sub: case K::Mul: case K::SafeDiv: case K::Min: case K::Max: case K::If: {
        int n = t->kind == K::If ? 4 : 2;
        for (int i = 0; i < n; ++i) t->kids.push_back(gen(depth - 1));
        for (auto& k : t->kids) t->shape |= k->shape;
        break;
      }
      case K::Neg: case K::Abs: case K::ExpCapped: case K::LogAbs: case K::SqrtAbs:
        t->kids.push_back(gen(depth - 1));
        t->shape = t->kids[0]->shape;
        break;
      case K::ReduceQ: case K::ReduceH: {
        unsigned axis = t->kind == K::ReduceQ ? kAxisQ : kAxisH;
        auto kid = gen(depth - 1);
        if (!(kid->shape & axis)) return kid;  // nothing to reduce: use the operand itself
        static const Reducer qr[] = {Reducer::Sum, Reducer::Mean, Reducer::Var, Reducer::Max, Reducer::Min};
        static const Reducer hr[] = {Reducer::Sum, Reducer::Mean, Reducer::Max};
        t->red = t->kind == K::ReduceQ ? qr[pick(0, 4)] : hr[pick(0, 2)];
        t->shape = kid->shape & ~axis;
        t->kids.push_back(std::move(kid));
        break;
      }
      case K::WindowLeaf: {
        static const Reducer wr[] = {Reducer::Sum, Reducer::Mean, Reducer::Max, Reducer::Min};
        t->red = wr[pick(0, 3)];
        t->lo = pick(-3, 1);
        t->hi = t->lo + pick(0, 4);
        t->window_on_acc = pick(0, 1) == 1;
        t->shape = t->window_on_acc ? (kAxisH | kAxisT) : kAxisT;
        break;
      }
    }
    return t;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  std::mt19937 rng_;
};

const char* reducer_name(Reducer r) {
  static const char* n[] = {"sum", "mean", "var", "max", "min", "entropy"};
  return n[static_cast<int>(r)];
}

// Reductions are hoisted into their own definitions (d0[...] = mean(q: ...)): the language does
// not let a reduction re-bind an axis that an enclosing definition or reduction already binds.
std::string text(const Tree& t, std::vector<std::string>& defs) {
  auto k = [&](int i) { return text(*t.kids[i], defs); };
  switch (t.kind) {
    case K::Const: {
      char b[32];
      std::snprintf(b, sizeof b, t.value < 0 ? "(%g)" : "%g", t.value);
      return b;
    }
    case K::KeyNorm: return "key_norm[t]";
    case K::ValueNorm: return "value_norm[t]";
    case K::Acc: return "A_acc[h, t]";
    case K::Attn: return "A[h, q, t]";
    case K::TSignal: return "T";
    case K::TIndex: return "t";
    case K::Add: return "(" + k(0) + " + " + k(1) + ")";
    case K::Sub: return "(" + k(0) + " - " + k(1) + ")";
    case K::Mul: return "(" + k(0) + " * " + k(1) + ")";
    case K::SafeDiv: return "(" + k(0) + " / (abs(" + k(1) + ") + 1))";
    case K::Min: return "min(" + k(0) + ", " + k(1) + ")";
    case K::Max: return "max(" + k(0) + ", " + k(1) + ")";
    case K::Neg: return "(-" + k(0) + ")";
    case K::Abs: return "abs(" + k(0) + ")";
    case K::ExpCapped: return "exp(min(" + k(0) + ", 4))";
    case K::LogAbs: return "log(abs(" + k(0) + ") + 1)";
    case K::SqrtAbs: return "sqrt(abs(" + k(0) + "))";
    case K::If: return "if(" + k(0) + " < " + k(1) + ", " + k(2) + ", " + k(3) + ")";
    case K::ReduceQ: case K::ReduceH: {
      const std::string body = std::string(reducer_name(t.red)) + (t.kind == K::ReduceQ ? "(q: " : "(h: ") + k(0) + ")";
      std::string axes;
      for (auto [bit, name] : {std::pair{kAxisH, "h"}, std::pair{kAxisQ, "q"}, std::pair{kAxisT, "t"}})
        if (t.shape & bit) axes += (axes.empty() ? "" : ", ") + std::string(name);
      const std::string name = "d" + std::to_string(defs.size());
      const std::string lhs = axes.empty() ? name : name + "[" + axes + "]";
      defs.push_back(lhs + " = " + body);
      return lhs;
    }
    case K::WindowLeaf:
      return std::string(reducer_name(t.red)) + "(k in " + std::to_string(t.lo) + " .. " + std::to_string(t.hi) + ": " +
             (t.window_on_acc ? "A_acc[h, t + k]" : "key_norm[t + k]") + ")";
  }
  return "";
}

// Direct evaluation at one (h, q, t).
float eval(const Tree& t, const Inputs& in, int h, int q, int tok) {
  auto k = [&](int i) { return eval(*t.kids[i], in, h, q, tok); };
  switch (t.kind) {
    case K::Const: return t.value;
    case K::KeyNorm: return in.kn[tok];
    case K::ValueNorm: return in.vn[tok];
    case K::Acc: return in.acc[h * in.T + tok];
    case K::Attn: return in.a(h, q, tok);
    case K::TSignal: return static_cast<float>(in.T);
    case K::TIndex: return static_cast<float>(tok);
    case K::Add: return k(0) + k(1);
    case K::Sub: return k(0) - k(1);
    case K::Mul: return k(0) * k(1);
    case K::SafeDiv: return k(0) / (std::fabs(k(1)) + 1.0f);
    case K::Min: return std::min(k(0), k(1));
    case K::Max: return std::max(k(0), k(1));
    case K::Neg: return -k(0);
    case K::Abs: return std::fabs(k(0));
    case K::ExpCapped: return std::exp(std::min(k(0), 4.0f));
    case K::LogAbs: return std::log(std::fabs(k(0)) + 1.0f);
    case K::SqrtAbs: return std::sqrt(std::fabs(k(0)));
    case K::If: return k(0) < k(1) ? k(2) : k(3);
    case K::ReduceQ: case K::ReduceH: {
      const bool over_q = t.kind == K::ReduceQ;
      const int n = over_q ? in.W : in.G;
      std::vector<float> xs;
      for (int i = 0; i < n; ++i) xs.push_back(over_q ? eval(*t.kids[0], in, h, i, tok) : eval(*t.kids[0], in, i, q, tok));
      float s = 0;
      switch (t.red) {
        case Reducer::Max: s = xs[0]; for (float x : xs) s = std::max(s, x); return s;
        case Reducer::Min: s = xs[0]; for (float x : xs) s = std::min(s, x); return s;
        case Reducer::Sum: for (float x : xs) s += x; return s;
        case Reducer::Mean: for (float x : xs) s += x; return s * (1.0f / n);
        case Reducer::Var: {
          for (float x : xs) s += x;
          const float m = s * (1.0f / n);
          float v = 0;
          for (float x : xs) v += (x - m) * (x - m);
          return n > 1 ? v * (1.0f / (n - 1)) : 0.0f;
        }
        default: return 0;
      }
    }
    case K::WindowLeaf: {
      float s = t.red == Reducer::Max ? -INFINITY : t.red == Reducer::Min ? INFINITY : 0.0f;
      bool any = false;
      for (int d = t.lo; d <= t.hi; ++d) {
        const int j = tok + d;
        if (j < 0 || j >= in.T) continue;  // padding
        any = true;
        const float x = t.window_on_acc ? in.acc[h * in.T + j] : in.kn[j];
        if (t.red == Reducer::Max) s = std::max(s, x);
        else if (t.red == Reducer::Min) s = std::min(s, x);
        else s += x;
      }
      if (!any && (t.red == Reducer::Max || t.red == Reducer::Min)) return 0.0f;
      return t.red == Reducer::Mean ? s * (1.0f / (t.hi - t.lo + 1)) : s;
    }
  }
  return 0;
}

TEST(DslProperty, InterpreterMatchesDirectEvaluationOnRandomTrees) {
  std::mt19937 rng(1234);
  int compared = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    Generator gen(seed);
    auto body = gen.gen(4);
    // Close the tree over h and q so the result is per token, as score[t] must be.
    auto root = std::move(body);
    if (root->shape & kAxisQ) {
      auto r = std::make_unique<Tree>();
      r->kind = K::ReduceQ;
      r->red = Reducer::Mean;
      r->shape = root->shape & ~kAxisQ;
      r->kids.push_back(std::move(root));
      root = std::move(r);
    }
    if (root->shape & kAxisH) {
      auto r = std::make_unique<Tree>();
      r->kind = K::ReduceH;
      r->red = Reducer::Sum;
      r->shape = root->shape & ~kAxisH;
      r->kids.push_back(std::move(root));
      root = std::move(r);
    }
    std::vector<std::string> defs;
    const std::string score = "score[t] = " + text(*root, defs);
    std::string program;
    for (const auto& d : defs) program += d + "\n";
    program += score;
    SCOPED_TRACE(program);
    Diagnostics diag("prop.dsl", program);
    TextOrigin origin;
    Program ast = parse_program(program, origin, diag);
    CheckOptions opt;
    LoweredProgram lowered = check_program(ast, opt, {1, 1}, diag);
    ASSERT_TRUE(diag.empty()) << diag.format();

    Inputs in;
    in.G = std::uniform_int_distribution<int>(1, 3)(rng);
    in.W = std::uniform_int_distribution<int>(1, 4)(rng);
    in.T = std::uniform_int_distribution<int>(1, 9)(rng);
    std::uniform_real_distribution<float> u(-1.0f, 2.0f);
    for (int i = 0; i < in.G * in.W * in.T; ++i) in.A.push_back(u(rng));
    for (int i = 0; i < in.G * in.T; ++i) in.acc.push_back(u(rng));
    for (int i = 0; i < in.T; ++i) in.kn.push_back(u(rng)), in.vn.push_back(u(rng));
    EvalInputs ev;
    ev.ext = {.g = 1, .h = in.G, .q = in.W, .d = 1, .t = in.T};
    ev.scalars[static_cast<int>(ScalarSignal::T)] = static_cast<float>(in.T);
    HeadSignals hs;
    hs.tensors[static_cast<int>(TensorSignal::WindowAttention)] = in.A.data();
    hs.tensors[static_cast<int>(TensorSignal::AccumulatedAttention)] = in.acc.data();
    hs.tensors[static_cast<int>(TensorSignal::KeyNorm)] = in.kn.data();
    hs.tensors[static_cast<int>(TensorSignal::ValueNorm)] = in.vn.data();
    ev.heads.push_back(hs);
    std::vector<float> got(in.T);
    evaluate_scores(lowered, ev, got.data());
    for (int t = 0; t < in.T; ++t) {
      const float want = eval(*root, in, 0, 0, t);
      EXPECT_NEAR(got[t], want, 1e-4f * std::max(1.0f, std::fabs(want))) << "token " << t;
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
}

}  // namespace
}  // namespace kvevict::dsl
