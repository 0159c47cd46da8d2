// The checker: operators, calls, reductions, sorts and window bounds; the class in checker_impl.h.
#include "dsl/checker_impl.h"

namespace kvevict::dsl::checker_detail {

Value Checker::unary(const Expr& e, Scope& scope) {
  Value a = check(*e.args[0], scope);
  if (!a.ok()) return error();
  if (e.text == "not") {
    if (a.type != Type::Bool) return fail(e.pos, std::string("'not' needs a boolean, found a ") + type_name(a.type));
    return Value{b_.unary(UnaryFn::Not, a.node), Type::Bool, a.shape};
  }
  if (a.type != Type::Number) return fail(e.pos, std::string("'-' needs a number, found a ") + type_name(a.type));
  return Value{b_.unary(UnaryFn::Neg, a.node), Type::Number, a.shape};
}

Value Checker::binary(const Expr& e, Scope& scope) {
  Value a = check(*e.args[0], scope);
  Value b = check(*e.args[1], scope);
  if (!a.ok() || !b.ok()) return error();
  const std::string& op = e.text;
  if (op == "==" || op == "!=") {
    if (a.type == Type::String) std::swap(a, b);
    if (a.type == Type::Enum || b.type == Type::String) return enum_compare(e, a, b, op == "==");
    if (a.type != b.type)
      return fail(e.pos, std::string("cannot compare a ") + type_name(a.type) + " with a " + type_name(b.type));
    return Value{b_.binary(op == "==" ? BinaryFn::Eq : BinaryFn::Ne, a.node, b.node), Type::Bool, a.shape | b.shape};
  }
  if (op == "and" || op == "or") {
    if (a.type != Type::Bool || b.type != Type::Bool)
      return fail(e.pos, "'" + op + "' needs booleans on both sides, found a " + type_name(a.type) + " and a " + type_name(b.type));
    return Value{b_.binary(op == "and" ? BinaryFn::And : BinaryFn::Or, a.node, b.node), Type::Bool, a.shape | b.shape};
  }
  if (a.type != Type::Number || b.type != Type::Number)
    return fail(e.pos, "'" + op + "' needs numbers on both sides, found a " + type_name(a.type) + " and a " + type_name(b.type));
  static const std::map<std::string, std::pair<BinaryFn, bool>> ops = {
      {"+", {BinaryFn::Add, false}}, {"-", {BinaryFn::Sub, false}}, {"*", {BinaryFn::Mul, false}},
      {"/", {BinaryFn::Div, false}}, {"^", {BinaryFn::Pow, false}}, {"<", {BinaryFn::Lt, true}},
      {"<=", {BinaryFn::Le, true}}, {">", {BinaryFn::Gt, true}}, {">=", {BinaryFn::Ge, true}}};
  auto it = ops.find(op);
  if (it == ops.end()) return fail(e.pos, "unknown operator '" + op + "'");
  return Value{b_.binary(it->second.first, a.node, b.node), it->second.second ? Type::Bool : Type::Number, a.shape | b.shape};
}

Value Checker::enum_compare(const Expr& e, const Value& a, const Value& b, bool equal) {
  if (a.type != Type::Enum || b.type != Type::String)
    return fail(e.pos, "a string can only be compared with an enum parameter");
  const ParamBinding& p = opt_.params[a.enum_param];
  for (size_t i = 0; i < p.options.size(); ++i)
    if (p.options[i] == b.text) return Value{b_.constant(((p.value == static_cast<double>(i)) == equal) ? 1.0f : 0.0f), Type::Bool, 0};
  std::string opts;
  for (const auto& o : p.options) opts += (opts.empty() ? "" : ", ") + o;
  return fail(e.args[1]->kind == ExprKind::String ? e.args[1]->pos : e.args[0]->pos,
              "'" + b.text + "' is not an option of parameter '" + p.name + "' (options: " + opts + ")");
}

Value Checker::call(const Expr& e, Scope& scope) {
  const std::string& f = e.text;
  auto arity = [&](size_t n) {
    if (e.args.size() == n) return true;
    diag_.error(e.pos, "'" + f + "' takes " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") + ", not " + std::to_string(e.args.size()));
    return false;
  };
  auto is_known = kUnaryFns.count(f) || kOtherFunctions.count(f) || kReducers.count(f);
  if (!is_known) {
    if (defs_.count(f) || kTensorSignals.count(f)) return fail(e.pos, "'" + f + "' is a tensor; index it with [ ], not ( )");
    return fail(e.pos, "unknown function '" + f + "'");
  }
  if (kReducers.count(f) && f != "max" && f != "min")
    return fail(e.pos, "'" + f + "' is a reduction: write " + f + "(axis: expression), e.g. " + f + "(q: A[h, q, t])");
  if (SortFn sf; sort_fn(f, sf))
    return fail(e.pos, "'" + f + "' runs along an axis: write " + f + (sf == SortFn::Quantile ? "(t: x[t], 0.5)" : "(t: x[t])"));
  if (f == "random") return fail(e.pos, "'random' is a per-token signal: write random[t]");
  if (f == "randn") return fail(e.pos, "'randn' is a Gaussian matrix [d, e]: write randn[d, e]");
  std::vector<Value> args;
  bool ok = true;
  for (const auto& a : e.args) {
    args.push_back(check(*a, scope));
    ok = ok && args.back().ok();
  }
  if (f == "if") {
    if (!arity(3) || !ok) return error();
    if (args[0].type != Type::Bool)
      return fail(e.args[0]->pos, std::string("the condition of 'if' must be a boolean, found a ") + type_name(args[0].type));
    if (args[1].type != args[2].type || (args[1].type != Type::Number && args[1].type != Type::Bool))
      return fail(e.pos, std::string("both branches of 'if' must have the same type (number or boolean), found a ") +
                             type_name(args[1].type) + " and a " + type_name(args[2].type));
    int n = b_.select(args[0].node, args[1].node, args[2].node);
    return Value{n, args[1].type, b_.node(n).shape};
  }
  if (!ok) return error();
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].type != Type::Number)
      return fail(e.args[i]->pos, "argument " + std::to_string(i + 1) + " of '" + f + "' must be a number, found a " + type_name(args[i].type));
  if (auto it = kUnaryFns.find(f); it != kUnaryFns.end()) {
    if (!arity(1)) return error();
    return Value{b_.unary(it->second, args[0].node), Type::Number, args[0].shape};
  }
  if (f == "pow") {
    if (!arity(2)) return error();
    return Value{b_.binary(BinaryFn::Pow, args[0].node, args[1].node), Type::Number, args[0].shape | args[1].shape};
  }
  if (f == "min" || f == "max") {
    if (args.size() < 2) return fail(e.pos, "'" + f + "' of values takes at least 2 arguments (to reduce, write " + f + "(axis: ...))");
    int n = args[0].node;
    unsigned shape = args[0].shape;
    for (size_t i = 1; i < args.size(); ++i) {
      n = b_.binary(f == "min" ? BinaryFn::Min : BinaryFn::Max, n, args[i].node);
      shape |= args[i].shape;
    }
    return Value{n, Type::Number, shape};
  }
  if (f == "clamp") {
    if (!arity(3)) return error();
    int n = b_.binary(BinaryFn::Min, b_.binary(BinaryFn::Max, args[0].node, args[1].node), args[2].node);
    return Value{n, Type::Number, args[0].shape | args[1].shape | args[2].shape};
  }
  if (f == "normalise") {
    if (!arity(1)) return error();
    if (!(args[0].shape & kAxisT)) return fail(e.pos, "'normalise' divides by the sum over tokens; its argument must have axis t");
    if (scope.in_window_body) return fail(e.pos, "'normalise' cannot be used inside a token window");
    return Value{b_.normalise(args[0].node), Type::Number, args[0].shape};
  }
  if (f == "inverse") {  // inverse(M): the SPD inverse over (d, e), batched (dsl/matrix_ops.h)
    if (!arity(1)) return error();
    if (const std::string why = inverse_operand_error(args[0].shape, layer_ctx()); !why.empty()) return fail(e.pos, why);
    return Value{b_.inverse(args[0].node), Type::Number, args[0].shape};
  }
  return fail(e.pos, "unknown function '" + f + "'");
}

Value Checker::reduce(const Expr& e, Scope& scope) {
  if (SortFn f; sort_fn(e.text, f)) return sort(f, e, scope);
  if (e.args.size() != 1) return fail(e.args[1]->pos, "'" + e.text + "' takes one operand after ':'");
  Reducer r = kReducers.at(e.text);
  if (opt_.context == ProgramContext::Setting) return fail(e.pos, "reductions are not available in a setting");
  Scope inner = scope;
  unsigned axes = 0;
  const Binder* window = nullptr;
  bool ok = true;
  for (const auto& bnd : e.binders) {
    if (bnd.lo) {
      if (window || axes) { diag_.error(bnd.pos, "a window reduction takes exactly one window variable and no axes"); ok = false; continue; }
      if (scope.in_window_body || !scope.window_var.empty()) {
        diag_.error(bnd.pos, "token windows cannot be nested");
        return error();  // the body's shifted reads would only repeat this error
      }
      if (reserved(bnd.name) || params_.count(bnd.name) || defs_.count(bnd.name) || axis(bnd.name)) {
        diag_.error(bnd.pos, "window variable '" + bnd.name + "' hides an existing name; choose another (e.g. k)");
        ok = false;
        continue;
      }
      window = &bnd;
      continue;
    }
    unsigned bit = axis(bnd.name);
    if (window) { diag_.error(bnd.pos, "a window reduction takes exactly one window variable and no axes"); ok = false; continue; }
    if (!bit || !(bit & context_axes())) {
      diag_.error(bnd.pos, "'" + bnd.name + "' is not an axis here; reduce over " + axes_text(" or ") +
                               ", or bind a window with '" + bnd.name + " in lo .. hi'");
      ok = false;
      continue;
    }
    if (scope.bound & bit) {
      diag_.error(bnd.pos, "axis '" + bnd.name + "' is already bound here (on the left side or by an enclosing reduction)");
      ok = false;
      continue;
    }
    if (axes & bit) { diag_.error(bnd.pos, "axis '" + bnd.name + "' is listed twice"); ok = false; continue; }
    axes |= bit;
  }
  int lo = 0, hi = 0;
  if (window) {
    if (r == Reducer::Var || r == Reducer::Entropy) {
      diag_.error(e.pos, "'" + e.text + "' cannot run over a token window; use sum, mean, max or min");
      ok = false;
    }
    ok = window_bound(*window->lo, lo) && ok;
    ok = window_bound(*window->hi, hi) && ok;
    if (ok && lo > hi) {
      diag_.error(window->pos, "empty window: " + std::to_string(lo) + " .. " + std::to_string(hi));
      ok = false;
    }
    if (!(scope.bound & kAxisT)) {
      diag_.error(window->pos, "a token window needs the token axis t bound (declare t on the left side)");
      ok = false;
    }
    inner.window_var = window->name;
    inner.in_window_body = true;
    inner.shift_sign = 0;
  } else {
    inner.bound |= axes;
    if (axes & kAxisT) inner.in_window_body = false;  // t is rebound: plain reads again
  }
  Value body = check(*e.args[0], inner);
  if (!ok || !body.ok()) return error();
  if (body.type != Type::Number) return fail(e.args[0]->pos, std::string("'") + e.text + "' needs numbers, found a " + type_name(body.type));
  if (window) {
    if (!(body.shape & kAxisT)) return fail(e.args[0]->pos, "the window body does not read any token at t + " + window->name);
    int a = inner.shift_sign < 0 ? -hi : lo;
    int b = inner.shift_sign < 0 ? -lo : hi;
    return Value{b_.window(r, a, b, body.node), Type::Number, body.shape};
  }
  if ((body.shape & axes) != axes)
    return fail(e.pos, "'" + e.text + "' over " + shape_name(axes & ~body.shape) + ", but the operand does not depend on that axis");
  if (r == Reducer::Var && (axes & kAxisS) && is_token_pair(body.shape))
    return fail(e.pos, "'var' over s of a token-pair value is not available (it is computed in tiles of s, which combine sums); "
                       "write mean(s: x^2) - mean(s: x)^2 with definitions");
  int n = b_.reduce(r, axes, body.node);
  return Value{n, Type::Number, body.shape & ~axes};
}

// rank(t: x), sorted_cumsum(t: x), quantile(t: x, p): one axis binder (dsl/sort_ops.h).
Value Checker::sort(SortFn f, const Expr& e, Scope& scope) {
  const std::string name = e.text;
  if (opt_.context == ProgramContext::Setting) return fail(e.pos, "'" + name + "' is not available in a setting");
  if (scope.in_window_body) return fail(e.pos, "'" + name + "' cannot be used inside a token window");
  const size_t operands = f == SortFn::Quantile ? 2 : 1;
  if (e.args.size() != operands)
    return fail(e.pos, "'" + name + "' takes " + (operands == 2 ? "an operand and a level after ':', e.g. quantile(t: x, 0.5)"
                                                                : "one operand after ':', e.g. " + name + "(t: x[t])"));
  if (e.binders.size() != 1 || e.binders[0].lo)
    return fail(e.binders[e.binders.size() > 1 ? 1 : 0].pos, "'" + name + "' runs along exactly one axis (no window variable)");
  const Binder& bnd = e.binders[0];
  const unsigned bit = axis(bnd.name);
  if (!bit || !(bit & context_axes())) return fail(bnd.pos, "'" + bnd.name + "' is not an axis here; use " + axes_text(" or "));
  // quantile removes its axis (a reduction: the axis must be free); rank and sorted_cumsum keep
  // it (a scan: the result is read at the axis index of the enclosing scope).
  if (f == SortFn::Quantile && (scope.bound & bit))
    return fail(bnd.pos, "axis '" + bnd.name + "' is already bound here (on the left side or by an enclosing reduction)");
  Scope inner = scope;
  inner.bound |= bit;
  Value body = check(*e.args[0], inner);
  Value level;
  if (f == SortFn::Quantile) level = check(*e.args[1], scope);
  if (!body.ok() || (f == SortFn::Quantile && !level.ok())) return error();
  if (body.type != Type::Number) return fail(e.args[0]->pos, "'" + name + "' needs numbers, found a " + type_name(body.type));
  if (const std::string why = sort_operand_error(f, bit, body.shape); !why.empty()) return fail(e.pos, why);
  if (f == SortFn::Quantile && (level.type != Type::Number || level.shape != 0))
    return fail(e.args[1]->pos, "the level of 'quantile' must be a scalar number (a constant, parameter or scalar signal), found " +
                                    (level.type == Type::Number ? shape_name(level.shape) : std::string("a ") + type_name(level.type)));
  const int n = b_.sort(f, bit, body.node, f == SortFn::Quantile ? level.node : -1);
  return Value{n, Type::Number, b_.node(n).shape};
}

// Window bounds: integer constants computed from parameters and numbers only.
bool Checker::window_bound(const Expr& e, int& out) {
  Scope empty;
  Value v = check(e, empty);
  if (!v.ok()) return false;
  if (v.type != Type::Number || !b_.is_constant(v.node)) {
    diag_.error(e.pos, "window bounds must be integer constants computed from parameters");
    return false;
  }
  float x = b_.node(v.node).value;
  if (!(std::fabs(x) <= kMaxWindowOffset) || x != std::floor(x)) {
    diag_.error(e.pos, "window bound must be an integer in -4096 .. 4096, found " + format_number(x));
    return false;
  }
  out = static_cast<int>(x);
  return true;
}

}  // namespace kvevict::dsl::checker_detail
