#pragma once
// Random, always-valid score programs for the generator's property test: policy files whose
// `score` (and sometimes `decode_score`) programs mix every construct of the language's score
// context (tensor and scalar signals, axis values, every unary and binary function, if, min/max/
// clamp/pow, every reducer over h, q and t, token windows shifted by t + k and t - k, normalise,
// parameters, definitions of every shape, the second axes s and e: token pairs and renamed
// reads, pair_terms, and the sort operations rank / sorted_cumsum / quantile along t, d, h and q,
// sort_term) and a matrix per program (matrix_terms: randn, inverse() of a well conditioned,
// singular, ill-conditioned or indefinite matrix, per head, per query head or per (h, q)).
// Expressions are built shape-correct by construction:
// every read uses axes bound at that point, every reduction's body depends on the reduced axes
// (an "anchor" term), every window body reads a token at t + k (or t - k). Every file declares
// four policy tables (dsl/table_data.h) shaped for RandomScoreInputs (4 layers, 2 KV heads,
// head_dim 64, n_embd 24) whose files table_files() returns, read as tl[layer], ta[layer, kv_head],
// tq[layer, kv_head, d] and (with the model axis c, in the read of hidden[c, t]) tc[layer, kv_head, c].
// channel_policy() writes a policy whose `channel_score[d]` program (key-channel pruning, ThinK's
// shape) is random in the same way: definitions of random shapes, then an output over d built by
// the same expressions with d bound (reductions over h, q and t, windows and normalise inside
// them), plus a K and a Q term so every program reads both. It draws from the instance's stream:
// tests call it on an instance of their own, so what policy() writes for a seed is unchanged.
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/engine/signals.h"

namespace kvevict::jit::testing {

class PolicyGenerator {
 public:
  // pairs: every program also gets pair_terms (axes s and e); their kernels loop over s and t
  // inside each token's thread, so callers running very long heads turn them off.
  explicit PolicyGenerator(uint32_t seed, bool pairs = true) : rng_(seed), pairs_(pairs) {}
  PolicyGenerator(const PolicyGenerator&) = delete;

  // A whole policy file named `name`.
  std::string policy(const std::string& name) {
    std::string text = "name: " + name + "\nabout: random policy for the generator's property test\n";
    text += "params:\n  gamma: {float: 1.5}\n  kernel: {int: 5, min: 1, max: 31}\n";
    text += "  mode: {enum: [a, b], default: a}\n";
    text += "tables:\n  tl: {file: tl.tsv, axes: [layer], shape: [4]}\n"
            "  ta: {file: ta.tsv, axes: [layer, kv_head], shape: [4, 2]}\n"
            "  tq: {file: tq.tsv, axes: [layer, kv_head, d], shape: [4, 2, 64]}\n"
            "  tc: {file: tc.tsv, axes: [layer, kv_head, c], shape: [4, 2, 24]}\n";
    std::string programs = "score: |\n" + program();
    if (pick(2) == 0) programs += "decode_score: |\n" + program();
    // segment: programs may read A_seg; A_replay needs observe.replay and a cross-head scope, which
    // only a file that reads it may have (core/engine/replay_checks.h).
    const bool replay = programs.find("A_replay[") != std::string::npos;
    text += std::string("observe: {window: 8, segment: 16") + (replay ? ", replay: {}}\nselect: {scope: model}\n" : "}\n");
    return text + programs;
  }

 public:
  // A policy with a trivial score and a random channel_score[d] program (see the header comment).
  std::string channel_policy(const std::string& name) {
    std::string text = "name: " + name + "\nabout: random channel_score program for the generator's tests\n";
    text += "params:\n  gamma: {float: 1.5}\n  kernel: {int: 5, min: 1, max: 31}\n";
    text += "  mode: {enum: [a, b], default: a}\n";
    text += "observe: {window: 8, segment: 16}\nrun: {prefill: true}\n";
    text += "tables:\n  tl: {file: tl.tsv, axes: [layer], shape: [4]}\n"
            "  ta: {file: ta.tsv, axes: [layer, kv_head], shape: [4, 2]}\n"
            "  tq: {file: tq.tsv, axes: [layer, kv_head, d], shape: [4, 2, 64]}\n"
            "  tc: {file: tc.tsv, axes: [layer, kv_head, c], shape: [4, 2, 24]}\n";
    text += "score: |\n  score[t] = key_norm[t]\n";
    defs_.clear();
    std::string program;
    const int count = 1 + pick(3);
    for (int i = 0; i < count; ++i) {
      const unsigned axes = subset(kH | kQ | kD | kT);
      const std::string def = "c" + std::to_string(i);
      Scope scope;
      scope.bound = axes;
      program += "  " + def + axis_list(axes, scope) + " = " + expr(scope, 3) + "\n";
      defs_[def] = axes;
    }
    // K over the tokens and Q over the group's window queries, reduced by a reducer that cycles
    // (by the call count, not a draw) so a modest sample covers each.
    static const char* const reducers[] = {"sum", "mean", "var", "max", "min"};
    const int f = channel_focus_++;
    Scope scope;
    scope.bound = kD;
    program += std::string("  kq[d] = ") + reducers[f % 5] + "(t: K[d, t] * K[d, t]) * " + reducers[(f + 2) % 5] +
               (f % 2 ? "(h, q: Q[h, q, d] ^ 2)" : "(h: mean(q: abs(Q[h, q, d])))") + "\n";
    program += "  channel_score[d] = kq[d] + " + expr(scope, 3) + " * 0.01 + " + anchor(scope, kD) + " * 0.001\n";
    return text + "channel_score: |\n" + program + "channels: {prune: 0.25}\n";
  }

  // The table files every policy of this generator reads (name -> text), random but fixed by the seed.
  std::map<std::string, std::string> table_files() {
    auto rows = [&](int n_rows, int n_cols) {
      std::string text;
      for (int r = 0; r < n_rows; ++r) {
        for (int c = 0; c < n_cols; ++c)
          text += (c ? "\t" : "") + std::to_string(std::uniform_real_distribution<double>(-2.0, 2.0)(rng_));
        text += "\n";
      }
      return text;
    };
    std::map<std::string, std::string> files = {{"tl.tsv", rows(1, 4)}, {"ta.tsv", rows(4, 2)}, {"tq.tsv", rows(8, 64)}};
    files["tc.tsv"] = rows(8, 24);
    return files;
  }

 private:
  static constexpr unsigned kH = kAxisH, kQ = kAxisQ, kD = kAxisD, kT = kAxisT;

  // A random subset of the axis bits in `from` (each in or out with probability 1/2).
  unsigned subset(unsigned from) {
    unsigned out = 0;
    for (unsigned bit : {kH, kQ, kD, kT})
      if ((from & bit) && pick(2)) out |= bit;
    return out;
  }

  struct Scope {
    unsigned bound = 0;    // axes that can be read
    bool window = false;   // inside a token window: tokens are read at t + k (or t - k)
    bool negative = false; // t - k instead of t + k
  };

  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  template <size_t N>
  const char* one_of(const char* const (&options)[N]) { return options[pick(int(N))]; }

  // The head scalars of the signal table (a score program has no layer scalars) and the
  // generated file's two parameters.
  static const std::vector<std::string>& scalar_names() {
    static const std::vector<std::string> names = [] {
      std::vector<std::string> all;
      for (const ScalarSignalInfo& info : kScalarSignalTable)
        if (!info.layer_only) all.emplace_back(info.dsl_name);
      all.push_back("gamma");
      all.push_back("kernel");
      return all;
    }();
    return names;
  }

  // Two to four definitions of random shapes, then the score.
  std::string program() {
    defs_.clear();
    std::string text;
    const int count = 1 + pick(3);
    for (int i = 0; i < count; ++i) {
      const unsigned axes = subset(kH | kQ | kD | kT);
      const std::string name = "d" + std::to_string(i);
      Scope scope;
      scope.bound = axes;
      text += "  " + name + axis_list(axes, scope) + " = " + expr(scope, 3) + "\n";
      defs_[name] = axes;
    }
    // A focus definition and window cycle through every reducer over t, every unary function
    // and every window reducer and offset kind, so a modest sample covers them all.
    static const char* const reducers[] = {"sum", "mean", "var", "max", "min", "entropy"};
    static const char* const unaries[] = {"exp", "log", "sqrt", "abs", "floor", "ceil", "round", "-", "sin", "cos"};
    static const char* const windows[] = {"sum", "mean", "max", "min"};
    static const char* const offsets[] = {"-1 .. 1", "2 .. 5", "-floor(kernel / 2) .. floor(kernel / 2)", "-6 .. -3", "0 .. 0"};
    const int f = focus_++;
    Scope inner;
    inner.bound = kT | subset(kH | kQ | kD);
    std::string list = std::string((inner.bound & kH) ? "h, " : "") + ((inner.bound & kQ) ? "q, " : "") +
                       ((inner.bound & kD) ? "d, " : "") + "t";
    text += std::string("  focus = ") + reducers[f % 6] + "(" + list + ": " + unaries[f % 10] + "(" +
            bounded_for(unaries[f % 10], "abs(" + expr(inner, 2) + ") + 0.5") + ") * " + anchor(inner, inner.bound) + ")\n";
    if (pairs_) text += pair_terms(f);
    text += matrix_terms(f);
    text += signal_term(f);
    text += sort_term(f);
    Scope scope;
    scope.bound = kT;
    Scope window_body = scope;
    window_body.window = true;
    window_body.negative = f % 3 == 0;
    text += "  score[t] = " + expr(scope, 3) + " + " + anchor(scope, kT) + " + focus * 0.5 + " + windows[f % 4] + "(k in " +
            offsets[f % 5] + ": " + expr(window_body, 2) + " + " + anchor(window_body, kT) + ")" + (pairs_ ? " + pair[t]" : "") + " + " + signal_read(f) + " * 0.001 + srt[t] * 0.001 + levc[t]\n";
    return text;
  }

  // One read of signal f (cycling through the signal table, so every signal is read whatever the
  // random draws do), reduced over all its axes but t: `sig` or `sig[t]`. A signal over the model
  // axis c (hidden[c, t]) is weighted by gelu of the table tc over c first: KVzap's linear form.
  static const TensorSignalInfo& signal_of(int f) { return kTensorSignalTable[size_t(f) % kTensorSignalTable.size()]; }
  static std::string signal_read(int f) { return (signal_of(f).axes & kAxisT) ? "sig[t]" : "sig"; }
  static std::string signal_term(int f) {
    const TensorSignalInfo& info = signal_of(f);
    static const std::pair<unsigned, const char*> names[] = {
        {kAxisH, "h"}, {kAxisQ, "q"}, {kAxisD, "d"}, {kAxisE, "e"}, {kAxisC, "c"}, {kAxisT, "t"}};
    std::string index, reduced;
    for (const auto& [bit, name] : names) {
      if (!(info.axes & bit)) continue;
      index += std::string(index.empty() ? "" : ", ") + name;
      if (bit != kAxisT) reduced += std::string(reduced.empty() ? "" : ", ") + name;
    }
    const std::string read = std::string(info.dsl_name) + "[" + index + "]" +
                             ((info.axes & kAxisC) ? " * gelu(tc[layer, kv_head, c] * 2)" : "");
    const std::string value = reduced.empty() ? read : "sum(" + reduced + ": " + read + ")";
    return "  " + signal_read(f) + " = " + value + "\n";
  }

  // One sort operation (dsl/sort_ops.h) per program, cycling through the operations and axes
  // without drawing random numbers (so the other draws, and what the fixed seed covers, stay as
  // they were). Operands are signals: rank and sorted_cumsum along t call them T times per token.
  static std::string sort_term(int f) {
    static const char* const terms[] = {
        "  srt[t] = rank(t: floor(key_norm[t] * 4))\n",  // many ties: the lower index first
        "  srt[t] = sorted_cumsum(t: mean(h: A_now[h, t]))\n",
        "  sq = quantile(t: value_norm[t] * gamma, 0.3)\n  srt[t] = sq + key_norm[t]\n",
        "  srt[t] = sum(d: rank(d: round(K[d, t])) * V[d, t])\n",
        "  sq[t] = quantile(q: sum(h: A[h, q, t]), 0.6)\n  srt[t] = sq[t] + mean(h: sorted_cumsum(h: A_now[h, t]))\n",
        "  mq[d] = quantile(t: K_pre[d, t], 0.9)\n  srt[t] = mean(h: rank(h: A_now[h, t])) + sum(d: mq[d] * V[d, t])\n"};
    return terms[f % 6];
  }

  // The second axes s and e (docs/DSL.md §3): a token-pair value over (s, t) from reads renamed to
  // s (and a contraction over d or e), a reduction over t that keeps s, and a reduction over s,
  // cycling through the reducers; bodies stay cheap (the generated kernel loops over s and t
  // inside each token's thread).
  std::string pair_terms(int f) {
    static const char* const bodies[] = {
        "sum(d: K[d, s] * V[d, t]) * 0.01",
        "if(s == t, 0, key_norm[s] - value_norm[t])",
        "sin(pos[s] * 0.1) * cos(pos[t] * gamma)",
        "sum(e: K_pre[e, s] * K[e, t] * 0.01 + e * 0.001) + random[s]",
        "mean(h: A_now[h, s] * A_now[h, t]) + s - t"};
    static const char* const exits[] = {"sum", "mean", "max", "min"};
    std::string text = "  pr[s, t] = " + std::string(bodies[f % 5]) + "\n";
    // pick[s] is called for every s inside each token's loop: its body is O(1) per pair.
    static const char* const cheap[] = {"key_norm[s] - value_norm[t]", "sin(pos[s] * 0.1) * cos(pos[t] * gamma)",
                                        "s - t + random[s]"};
    text += "  pick[s] = " + std::string(exits[(f + 1) % 4]) + "(t: if(" + cheap[f % 3] + " > " +
            one_of({"0", "0.5", "-0.25"}) + ", t, 0))\n";
    text += "  pair[t] = " + std::string(exits[f % 4]) + "(s: if(t == pick[s], 0, pr[s, t]) * (1 + 0 * s))\n";
    return text;
  }

  // inverse() of a matrix C over (d, e), cycling (by f, not by the random draws: the rest of the
  // sample stays as it was) through its conditioning and axes: SPD with a Gaussian term (randn),
  // singular (rank 3, the ridge fallback; per query head h, the ridge h is 0 for h = 0), ill
  // conditioned and batched over (h, q), indefinite (no inverse: NaN). The leverage of the keys
  // under it reaches the score through levc, which maps NaN to a constant so that a NaN matrix
  // does not turn the whole program's scores into -inf. Cost: head_dim^2 x T once per matrix, and
  // head_dim^2 per token.
  static std::string matrix_terms(int f) {
    static const char* const axes[] = {"d, e", "h, d, e", "h, q, d, e", "d, e"};
    static const char* const bodies[] = {
        "sum(t: K[d, t] * K[e, t]) * 0.01 + randn[d, e] * randn[e, d] * 0.01 + if(d == e, 1, 0)",
        "sum(t: if(t < 3, K[d, t] * K[e, t], 0)) + if(d == e, h, 0)",
        "sum(t: K_pre[d, t] * K_pre[e, t]) + if(d == e, 1e-6 * (1 + q + h), 0)",
        "sum(t: V[d, t] * V[e, t]) - if(d == e, 1e6, 0)"};
    static const char* const contraction[] = {"d, e", "h, d, e", "h, q, d, e", "d, e"};
    const int k = f % 4;
    return std::string("  mat[") + axes[k] + "] = " + bodies[k] + "\n  mi[" + axes[k] + "] = inverse(mat[" + axes[k] +
           "])\n  lev[t] = sum(" + contraction[k] + ": K[d, t] * mi[" + axes[k] + "] * K[e, t]) * 0.001\n" +
           "  levc[t] = if(lev[t] == lev[t], lev[t], 0.5)\n";
  }

  // "[h, q, t]" for the axes (empty for a scalar); tokens as t + k inside a window.
  std::string axis_list(unsigned axes, const Scope& s) const {
    std::vector<std::string> parts;
    if (axes & kH) parts.push_back("h");
    if (axes & kQ) parts.push_back("q");
    if (axes & kD) parts.push_back("d");
    if (axes & kAxisE) parts.push_back("e");
    if (axes & kT) parts.push_back(s.window ? (s.negative ? "t - k" : "t + k") : "t");
    if (parts.empty()) return "";
    std::string text = "[";
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : "") + parts[i];
    return text + "]";
  }

  // Tensor reads (signals and definitions) possible in this scope, optionally only those with t.
  std::vector<std::string> reads(const Scope& s, bool need_t) const {
    struct Tensor {
      const char* name;
      unsigned axes;
    };
    static const std::vector<Tensor> signals = [] {  // the signal table, and random()
      std::vector<Tensor> all;
      // A_replay only through signal_term's read, which the score always uses: a file may declare
      // observe.replay only when a program really reads it (core/engine/replay_checks.h).
      for (const TensorSignalInfo& info : kTensorSignalTable)
        if (info.source != SignalSource::Replay) all.push_back({info.dsl_name.data(), info.axes});
      all.push_back({"random", kT});
      return all;
    }();
    std::vector<std::string> out;
    if (!need_t) {  // policy tables: scalars, or vectors over d
      out.push_back("tl[layer]");
      out.push_back("ta[layer, kv_head]");
      if (s.bound & kD) out.push_back("tq[layer, kv_head, d]");
    }
    for (const auto& t : signals) {
      if ((t.axes & kAxisE) || (t.axes & ~s.bound) != 0 || (need_t && !(t.axes & kT))) continue;
      std::string read = t.name + axis_list(t.axes, s);
      // A signal with the second channel axis e (Q_cov[h, d, e]) rides along with the signal of
      // its other axes (Q_mean[h, d]) inside a reduction over e, so the random draws (and what the
      // fixed seed covers) stay as they were before e existed.
      for (const auto& u : signals)
        if ((u.axes & kAxisE) && (u.axes & ~kAxisE) == t.axes)
          read = "(" + read + " + sum(e: " + std::string(u.name) + axis_list(u.axes, s) + "))";
      out.push_back(read);
    }
    // A definition declared with t may still hold a value without it (broadcast), so anchors
    // (need_t) use signals only.
    if (!need_t)
      for (const auto& [name, axes] : defs_)
        if ((axes & ~s.bound) == 0) out.push_back(name + axis_list(axes, s));
    return out;
  }

  std::string leaf(const Scope& s) {
    switch (pick(5)) {
      case 0: return one_of({"0.5", "2", "3.25", "1e-3", "0", "7", "(1 / 3)"});
      case 1:
        return scalar_names()[size_t(pick(int(scalar_names().size())))];
      case 2: {
        std::vector<std::string> axes;
        if (s.bound & kH) axes.push_back("h");
        if (s.bound & kQ) axes.push_back("q");
        if (s.bound & kD) axes.push_back("d");
        if ((s.bound & kT) && !s.window) axes.push_back("t");  // a window reads tokens only at t + k
        if (!axes.empty()) return axes[size_t(pick(int(axes.size())))];
        [[fallthrough]];
      }
      default: {
        const auto options = reads(s, false);
        if (options.empty()) return "prompt_len";  // a scalar scope without scalar definitions
        return options[size_t(pick(int(options.size())))];
      }
    }
  }

  // The argument of sin / cos squashed into (-1, 1): sin of a large argument (an entropy of logs
  // reaches 1e4) turns the few-ulp difference of the interpreter's vectorised log (docs/JIT.md)
  // into a difference of the result in the third digit, an ill-conditioned test, not a generator
  // bug. Other functions keep their argument.
  static std::string bounded_for(const std::string& f, const std::string& x) {
    if (f != "sin" && f != "cos") return x;
    return "(" + x + ") / (1 + abs(" + x + "))";
  }

  // A term that depends on every axis in `need` (all bound in s).
  std::string anchor(const Scope& s, unsigned need) {
    std::vector<std::string> parts;
    if (need & kT) {
      auto options = reads(s, true);
      if (!s.window) options.push_back("t");
      parts.push_back(options[size_t(pick(int(options.size())))]);
    }
    if (need & kH) parts.push_back(pick(2) && (s.bound & kT) ? "A_now" + axis_list(kH | kT, s) : "h");
    if (need & kQ) parts.push_back(pick(2) && (s.bound & (kH | kT)) == (kH | kT) ? "A" + axis_list(kH | kQ | kT, s) : "q");
    if (need & kD) parts.push_back(pick(2) && (s.bound & kT) ? one_of({"K", "K_pre", "V"}) + axis_list(kD | kT, s) : "d");
    std::string text = "(";
    for (size_t i = 0; i < parts.size(); ++i) text += (i ? one_of({" + ", " * ", " - "}) : "") + parts[i];
    return text + ")";
  }

  std::string condition(const Scope& s, int depth) {
    if (depth <= 0) return leaf(s) + " < " + leaf(s);
    switch (pick(6)) {
      case 0: return "not (" + condition(s, depth - 1) + ")";
      case 1: return "(" + condition(s, depth - 1) + " and " + condition(s, depth - 1) + ")";
      case 2: return "(" + condition(s, depth - 1) + " or " + condition(s, depth - 1) + ")";
      case 3: return "mode == \"" + std::string(one_of({"a", "b"})) + "\"";
      default:
        return expr(s, depth - 1) + " " + one_of({"<", "<=", ">", ">=", "==", "!="}) + " " + expr(s, depth - 1);
    }
  }

  std::string expr(const Scope& s, int depth) {
    if (depth <= 0) return leaf(s);
    switch (pick(13)) {
      case 0: return leaf(s);
      case 1: return "-" + leaf(s);
      case 2: {
        const std::string f = one_of({"exp", "log", "sqrt", "abs", "floor", "ceil", "round", "sin", "cos"});
        return f + "(" + bounded_for(f, expr(s, depth - 1)) + ")";
      }
      case 3:
      case 4:
        return "(" + expr(s, depth - 1) + " " + one_of({"+", "-", "*", "/", "^"}) + " " + expr(s, depth - 1) + ")";
      case 5: return "if(" + condition(s, depth) + ", " + expr(s, depth - 1) + ", " + expr(s, depth - 1) + ")";
      case 6:
        switch (pick(4)) {
          case 0: return "pow(" + expr(s, depth - 1) + ", " + leaf(s) + ")";
          case 1: return "clamp(" + expr(s, depth - 1) + ", " + leaf(s) + ", " + leaf(s) + ")";
          default:
            return std::string(one_of({"min", "max"})) + "(" + expr(s, depth - 1) + ", " + expr(s, depth - 1) +
                   (pick(2) ? ", " + leaf(s) : std::string()) + ")";
        }
      case 7:
      case 8:
      case 9: return reduction(s, depth);
      case 10: return window(s, depth);
      case 11: return normalise(s, depth);
      default: return "if(" + condition(s, depth) + ", " + leaf(s) + ", " + leaf(s) + ")";
    }
  }

  std::string reduction(const Scope& s, int depth) {
    const unsigned free_axes = (kH | kQ | kD | kT) & ~s.bound;
    if (!free_axes) return expr(s, depth - 1);
    unsigned axes = 0;
    while (!axes) axes = subset(free_axes);
    Scope inner = s;
    inner.bound |= axes;
    std::string list;
    for (const char* axis : {"h", "q", "d", "t"}) {
      const unsigned bit = axis[0] == 'h' ? kH : axis[0] == 'q' ? kQ : axis[0] == 'd' ? kD : kT;
      if (axes & bit) list += (list.empty() ? "" : ", ") + std::string(axis);
    }
    return std::string(one_of({"sum", "mean", "var", "max", "min", "entropy"})) + "(" + list + ": (" + expr(inner, depth - 1) +
           ") " + one_of({"+", "*"}) + " " + anchor(inner, axes) + ")";
  }

  std::string window(const Scope& s, int depth) {
    if (!(s.bound & kT) || s.window) return expr(s, depth - 1);
    Scope inner = s;
    inner.window = true;
    inner.negative = pick(3) == 0;
    return std::string(one_of({"sum", "mean", "max", "min"})) + "(k in " +
           one_of({"-1 .. 1", "-floor(kernel / 2) .. floor(kernel / 2)", "0 .. 3", "-4 .. 0", "2 .. 5", "-6 .. -3"}) + ": (" +
           expr(inner, depth - 1) + ") + " + anchor(inner, kT) + ")";
  }

  std::string normalise(const Scope& s, int depth) {
    if (!(s.bound & kT) || s.window) return expr(s, depth - 1);
    return "normalise(" + expr(s, depth - 1) + " + " + anchor(s, kT) + ")";
  }

  std::mt19937 rng_;
  bool pairs_ = true;
  int focus_ = 0;
  int channel_focus_ = 0;
  std::map<std::string, unsigned> defs_;  // definitions so far: name -> axes
};

}  // namespace kvevict::jit::testing
