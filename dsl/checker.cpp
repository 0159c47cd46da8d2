// The checker: programs, definitions and names; the contract in checker.h, the class in
// checker_impl.h.
#include "dsl/checker.h"
#include "dsl/checker_impl.h"

namespace kvevict::dsl {
namespace checker_detail {

LoweredProgram Checker::program(const Program& p, FilePos program_pos) {
  const bool score = opt_.context == ProgramContext::Score;
  const std::string out_name = output_name();
  int output = -1;
  for (const auto& d : p.definitions) hide_axis(d.name);
  for (const auto& d : p.definitions) {
    int node = definition(d);
    if (d.name == out_name) output = node;
  }
  if (!defs_.count(out_name) && !reported_output_ && !opt_.had_syntax_errors) {
    diag_.error(program_pos, score ? "the program must define 'score[t]' (one score per cached token)"
                             : channel_ctx() ? "the program must define 'channel_score[d]' (one score per key channel)"
                                             : "the program must define the scalar '" + out_name + "'");
  }
  if (output < 0) output = b_.constant(0);
  return b_.finish(output);
}

LoweredProgram Checker::setting(const Expr& e, bool want_bool) {
  Scope scope;
  Value v = check(e, scope);
  int node = b_.constant(0);
  if (v.ok()) {
    if (want_bool && v.type != Type::Bool)
      diag_.error(e.pos, std::string("expected a boolean (true/false or a comparison), found a ") + type_name(v.type));
    else if (!want_bool && v.type != Type::Number)
      diag_.error(e.pos, std::string("expected a number, found a ") + type_name(v.type));
    else
      node = v.node;
  }
  return b_.finish(node);
}

// definition: checks the left side (name, axes) and the value; records the definition.
int Checker::definition(const ::kvevict::dsl::Definition& d) {
  bool ok = true;
  if (reserved(d.name)) {
    diag_.error(d.pos, "'" + d.name + "' is a built-in name and cannot be redefined");
    ok = false;
  } else if (params_.count(d.name)) {
    diag_.error(d.pos, "'" + d.name + "' is a parameter and cannot be redefined");
    ok = false;
  } else if (defs_.count(d.name)) {
    diag_.error(d.pos, "'" + d.name + "' is already defined");
    ok = false;
  } else if (is_table(d.name)) {
    diag_.error(d.pos, "'" + d.name + "' is a table and cannot be redefined");
    ok = false;
  }
  unsigned axes = 0;
  unsigned last = 0;
  for (size_t i = 0; i < d.axes.size(); ++i) {
    unsigned bit = axis(d.axes[i]);
    if (!bit || !(bit & context_axes())) {
      diag_.error(d.axis_pos[i], "'" + d.axes[i] + "' is not an axis here (axes: " + axes_text() + ")");
      ok = false;
      continue;
    }
    if (axes & bit) { diag_.error(d.axis_pos[i], "axis '" + d.axes[i] + "' appears twice"); ok = false; continue; }
    if (bit < last) {
      diag_.error(d.axis_pos[i], "axes must be listed in the order " + axes_text());
      ok = false;
    }
    last = bit;
    axes |= bit;
  }
  const bool is_output = d.name == output_name();
  if (is_output && ok) {
    unsigned want = opt_.context == ProgramContext::Score ? kAxisT : channel_ctx() ? kAxisD : 0u;
    if (axes != want) {
      diag_.error(d.pos, opt_.context == ProgramContext::Score
                             ? "'score' must be declared per token: score[t] = ..."
                         : channel_ctx() ? "'channel_score' must be declared per key channel: channel_score[d] = ..."
                                         : quoted(output_name()) + " must be a scalar: " + output_name() + " = ...");
      reported_output_ = true;
      ok = false;
    }
  }
  Scope scope;
  scope.bound = axes;
  if (!d.value) {  // the parser already reported this definition's value
    if (!defs_.count(d.name)) defs_[d.name] = Definition{axes, -1, Type::Error};
    return -1;
  }
  Value v = check(*d.value, scope);
  if (v.ok() && v.type != Type::Number && v.type != Type::Bool)
    v = fail(d.value->pos, std::string("a definition must hold numbers or booleans, not a ") + type_name(v.type));
  if (v.ok() && (v.shape & ~axes)) {
    // Cannot happen through reads (indices must be bound) but guards against future operations.
    v = fail(d.value->pos, "the value has shape " + shape_name(v.shape) + " but '" + d.name + "' is declared " + shape_name(axes));
  }
  if (is_output && v.ok() && v.type != Type::Number)
    v = fail(d.value->pos, "'" + d.name + "' must be a number, not a boolean");
  if (!ok && !defs_.count(d.name) && !reserved(d.name) && !params_.count(d.name)) {
    defs_[d.name] = Definition{axes, -1, Type::Error};  // silences "unknown name" follow-ons
    return -1;
  }
  if (ok) defs_[d.name] = Definition{axes, v.ok() ? v.node : -1, v.ok() ? v.type : Type::Error};
  if (ok && !v.ok()) return -1;
  return ok ? v.node : -1;
}

// Lowers e; every node it creates that an operand did not already claim gets e's position, so
// generated code can cite the policy line of each expression (#line in the CUDA generator).
Value Checker::check(const Expr& e, Scope& scope) {
  const int first = b_.size();
  Value v = check_expr(e, scope);
  b_.locate(first, e.pos.line, e.pos.col);
  const unsigned extra = v.shape & ~kvevict::kTokenPair;
  if (v.ok() && is_token_pair(v.shape) && (extra & kvevict::kAxisC))
    // A row of s over the model dimension would be n_embd x T numbers: outside the static bound.
    return fail(e.pos, "this value has shape " + shape_name(v.shape) +
                           ": a token-pair value (axes s and t) cannot carry the model axis c; reduce over c first");
  if (v.ok() && is_token_pair(v.shape) && ((extra & kAxisQ) || (extra & (extra - 1))))
    // The static bound of a token pair: one row of s holds at most max(n_kv_heads, G,
    // head_dim) x T numbers (the interpreter's tiles hold whole rows of s; lowered.h).
    return fail(e.pos, "this value has shape " + shape_name(v.shape) +
                           ": a token-pair value (axes s and t) may carry at most one more axis, g, h, d or e (never q)");
  return v;
}

Value Checker::check_expr(const Expr& e, Scope& scope) {
  switch (e.kind) {
    case ExprKind::Number: return Value{b_.constant(static_cast<float>(e.number)), Type::Number, 0};
    case ExprKind::String: { Value v; v.type = Type::String; v.text = e.text; v.node = -1; return v; }
    case ExprKind::Name: return name(e, scope);
    case ExprKind::Read: return read(e, scope);
    case ExprKind::Unary: return unary(e, scope);
    case ExprKind::Binary: return binary(e, scope);
    case ExprKind::Call: return call(e, scope);
    case ExprKind::Reduce: return reduce(e, scope);
  }
  return error();
}

Value Checker::name(const Expr& e, Scope& scope) {
  const std::string& n = e.text;
  if (auto it = params_.find(n); it != params_.end()) {
    const ParamBinding& p = opt_.params[it->second];
    Value v{b_.constant(static_cast<float>(p.value)), p.type, 0};
    if (p.type == Type::Enum) v.enum_param = it->second;
    return v;
  }
  if (n == "true" || n == "false") return Value{b_.constant(n == "true" ? 1.0f : 0.0f), Type::Bool, 0};
  if (opt_.context == ProgramContext::HeadMode) {  // the values of head_mode (head_budgets.h: HeadMode)
    if (n == "compressed") return Value{b_.constant(0.0f), Type::Number, 0};
    if (n == "full") return Value{b_.constant(1.0f), Type::Number, 0};
    if (n == "streaming") return Value{b_.constant(2.0f), Type::Number, 0};
  }
  if (auto it = defs_.find(n); it != defs_.end()) {
    if (it->second.axes != 0)
      return fail(e.pos, "'" + n + "' is a tensor " + shape_name(it->second.axes) + "; index it, e.g. " + n + index_hint(it->second.axes));
    if (it->second.node < 0) return error();
    return Value{it->second.node, it->second.type, b_.node(it->second.node).shape};
  }
  if (auto it = kScalarSignals.find(n); it != kScalarSignals.end()) {
    if (opt_.context == ProgramContext::Setting) {
      const bool decode_input = it->second == ScalarSignal::DecodeStep || it->second == ScalarSignal::Budget;
      if ((it->second == ScalarSignal::PromptLen && opt_.allow_prompt_len) ||
          (decode_input && opt_.allow_decode_budget_inputs))
        return Value{b_.scalar(it->second), Type::Number, 0};
      return fail(e.pos, "'" + n + "' is not available in a setting; settings may use parameters" +
                             std::string(opt_.allow_decode_budget_inputs ? ", prompt_len, decode_step and budget"
                                         : opt_.allow_prompt_len       ? " and prompt_len"
                                                                       : ""));
    }
    if (it->second == ScalarSignal::Budget && !layer_ctx())
      return fail(e.pos, "'budget' is only available in layer_weight programs");
    if (it->second == ScalarSignal::KvHead && layer_ctx())
      return fail(e.pos, "'kv_head' is not available in layer_weight programs (use axis g)");
    return Value{b_.scalar(it->second), Type::Number, 0};
  }
  if (unsigned bit = axis(n)) {
    if (!(bit & context_axes())) return fail(e.pos, "axis '" + n + "' is not available here");
    if (!(scope.bound & bit))
      return fail(e.pos, "axis '" + n + "' is not bound here: declare it on the left side or reduce over it");
    if (bit == kAxisT && scope.in_window_body)
      return fail(e.pos, "inside the window over '" + scope.window_var + "', the token axis may only be read as t + " + scope.window_var);
    return Value{b_.axis_index(bit), Type::Number, bit};
  }
  if (n == scope.window_var && !n.empty())
    return fail(e.pos, "window variable '" + n + "' can only shift the token index (t + " + n + ")");
  if (kTensorSignals.count(n))
    return fail(e.pos, "'" + n + "' is a tensor signal " + shape_name(signal_shape(kTensorSignals.at(n))) + "; index it, e.g. " + n + index_hint(signal_shape(kTensorSignals.at(n))));
  if (n == "random") return fail(e.pos, "'random' is a per-token signal; write random[t]");
  if (n == "randn") return fail(e.pos, "'randn' is a Gaussian matrix [d, e]; write randn[d, e]");
  if (is_table(n)) return fail(e.pos, "'" + n + "' is a table; index it, e.g. " + n + "[layer, kv_head]");
  if (kUnaryFns.count(n) || kReducers.count(n) || kOtherFunctions.count(n))
    return fail(e.pos, "'" + n + "' is a function; call it with arguments in parentheses");
  return fail(e.pos, "unknown name '" + n + "'");
}

}  // namespace checker_detail

using checker_detail::Checker;

LoweredProgram check_program(const Program& program, const CheckOptions& options, FilePos program_pos, Diagnostics& diag) {
  Checker c(options, diag);
  return c.program(program, program_pos);
}

LoweredProgram check_setting(const Expr& expr, const CheckOptions& options, bool want_bool, Diagnostics& diag) {
  CheckOptions o = options;
  o.context = ProgramContext::Setting;
  Checker c(o, diag);
  return c.setting(expr, want_bool);
}

}  // namespace kvevict::dsl
