#include "dsl/checker.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "dsl/builtin_names.h"
#include "dsl/matrix_ops.h"
#include "dsl/program_builder.h"
#include "dsl/sort_ops.h"

namespace kvevict::dsl {
namespace {

// Window bounds are compile-time constants; this keeps every pooling loop small.
constexpr int kMaxWindowOffset = 4096;

struct Value {
  Value() = default;
  Value(int n, Type t, unsigned s) : node(n), type(t), shape(s) {}
  int node = -1;
  Type type = Type::Error;
  unsigned shape = 0;
  int enum_param = -1;
  std::string text;  // String literal contents
  bool ok() const { return type != Type::Error; }
};

struct Scope {
  unsigned bound = 0;            // axes usable as indices here (declared on the left or reduced over)
  std::string window_var;        // the active window variable, if any
  bool in_window_body = false;   // token reads must be shifted by window_var
  int shift_sign = 0;            // +1 (t + k) or -1 (t - k) once a shifted read was seen
};

struct Definition {
  unsigned axes = 0;
  int node = -1;
  Type type = Type::Error;
};

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}


const char* type_name(Type t) {
  switch (t) {
    case Type::Number: return "number";
    case Type::Bool: return "boolean";
    case Type::Enum: return "enum";
    case Type::String: return "string";
    default: return "error";
  }
}

class Checker {
 public:
  Checker(const CheckOptions& options, Diagnostics& diag)
      : opt_(options), diag_(diag), b_(options.context == ProgramContext::LayerWeight) {
    for (size_t i = 0; i < opt_.params.size(); ++i) {
      params_[opt_.params[i].name] = static_cast<int>(i);
      hide_axis(opt_.params[i].name);
    }
    b_.set_tables(opt_.tables);
  }

  LoweredProgram program(const Program& p, FilePos program_pos) {
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

  LoweredProgram setting(const Expr& e, bool want_bool) {
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

 private:
  bool layer_ctx() const { return opt_.context == ProgramContext::LayerWeight; }
  bool channel_ctx() const { return opt_.context == ProgramContext::ChannelScore; }
  std::string output_name() const {
    switch (opt_.context) {
      case ProgramContext::Score: return "score";
      case ProgramContext::HeadWeight: return "head_weight";
      case ProgramContext::HeadMode: return "head_mode";
      case ProgramContext::ChannelScore: return "channel_score";
      default: return "layer_weight";
    }
  }
  unsigned context_axes() const {
    if (opt_.context == ProgramContext::Setting) return 0;
    return (layer_ctx() ? kAllAxes : (kAllAxes & ~unsigned(kAxisG))) & ~hidden_axes_;
  }
  // "g, h, q, d, e, s, t": the axes of this context, in canonical order (the axis table).
  std::string axes_text(const char* last_joiner = ", ") const {
    std::vector<std::string> names;
    for (const auto& axis : kvevict::kAxisTable)
      if (axis.bit & context_axes()) names.emplace_back(axis.dsl_name);
    std::string text;
    for (size_t i = 0; i < names.size(); ++i)
      text += (i == 0 ? "" : i + 1 == names.size() ? last_joiner : ", ") + names[i];
    return text;
  }
  // "'h'" or "'d' or 'e'": the axes of the kind of `bit`.
  static std::string kind_text(unsigned bit) {
    std::string text;
    for (const auto& axis : kvevict::kAxisTable)
      if (axis.kind == kvevict::axis_kind(bit)) text += (text.empty() ? "'" : " or '") + std::string(axis.dsl_name) + "'";
    return text;
  }
  Value error() { return Value{}; }
  Value fail(FilePos pos, const std::string& message) {
    diag_.error(pos, message);
    return Value{};
  }

  bool reserved(const std::string& name) const { return is_builtin_name(name); }
  // Axes e and s are not reserved (builtin_names.h): a parameter or definition of that name
  // (snapkv's s[h, t], cake's e[h, t]) hides the axis in this program.
  void hide_axis(const std::string& name) {
    const unsigned bit = axis_bit(name);
    if (bit && !kvevict::kAxisTable[kvevict::axis_index(bit)].reserved) hidden_axes_ |= bit;
  }
  unsigned axis(const std::string& name) const { return axis_bit(name) & ~hidden_axes_; }
  bool is_table(const std::string& name) const {
    for (const auto& t : opt_.tables)
      if (t->name == name) return true;
    return false;
  }

  // definition: checks the left side (name, axes) and the value; records the definition.
  int definition(const ::kvevict::dsl::Definition& d) {
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
                                           : "'" + output_name() + "' must be a scalar: " + output_name() + " = ...");
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
  Value check(const Expr& e, Scope& scope) {
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

  Value check_expr(const Expr& e, Scope& scope) {
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

  Value name(const Expr& e, Scope& scope) {
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

  unsigned signal_shape(TensorSignal s) const { return tensor_signal_shape(s) | (layer_ctx() ? kAxisG : 0u); }

  static std::string index_hint(unsigned axes) {
    std::string s = shape_name(axes);
    return s;
  }

  Value read(const Expr& e, Scope& scope) {
    unsigned axes = 0;
    int node = -1;
    Type type = Type::Number;
    bool is_random = false, is_randn = false;
    if (opt_.context == ProgramContext::Setting) return fail(e.pos, "tensors are not available in a setting");
    for (size_t i = 0; i < opt_.tables.size(); ++i)
      if (opt_.tables[i]->name == e.text && !defs_.count(e.text)) return table_read(e, scope, static_cast<int>(i));
    if (auto it = kTensorSignals.find(e.text); it != kTensorSignals.end()) {
      axes = signal_shape(it->second);
    } else if (e.text == "random") {
      if (layer_ctx()) return fail(e.pos, "random[t] is not available in layer_weight programs");
      axes = kAxisT;
      is_random = true;
    } else if (e.text == "randn") {  // the Gaussian sketch (core/engine/gaussian_rng.h)
      if (layer_ctx()) return fail(e.pos, "randn[d, e] is not available in layer_weight programs");
      axes = kAxisD | kAxisE;
      is_randn = true;
    } else if (auto d = defs_.find(e.text); d != defs_.end()) {
      if (d->second.axes == 0) return fail(e.pos, "'" + e.text + "' is a scalar and takes no index");
      axes = d->second.axes;
      node = d->second.node;
      type = d->second.type;
    } else if (params_.count(e.text) || kScalarSignals.count(e.text)) {
      return fail(e.pos, "'" + e.text + "' is a scalar and takes no index");
    } else {
      return fail(e.pos, "unknown tensor '" + e.text + "'");
    }
    // Indices name the tensor's axes in order: A[h, q, t]; each may be bound to another axis of
    // the same kind (K[e, s]: K's channel axis read at e, its token axis at s), and the token axis
    // t may be shifted by the active window variable. Nothing else can index, so no read can
    // leave its buffer.
    std::vector<unsigned> want;
    for (const auto& axis : kvevict::kAxisTable)
      if (axes & axis.bit) want.push_back(axis.bit);
    if (e.indices.size() != want.size())
      return fail(e.pos, "'" + e.text + "' has axes " + shape_name(axes) + " and takes " + std::to_string(want.size()) +
                             " indices, not " + std::to_string(e.indices.size()));
    bool ok = true;
    int map = rename_identity();
    unsigned targets = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const IndexTerm& idx = e.indices[i];
      unsigned bit = axis(idx.axis);
      if (!bit || kvevict::axis_kind(bit) != kvevict::axis_kind(want[i])) {
        diag_.error(idx.pos, "index " + std::to_string(i + 1) + " of '" + e.text + "' must be axis " + kind_text(want[i]) +
                                 " (" + e.text + " has axes " + shape_name(axes) + "), found '" + idx.axis + "'");
        ok = false;
        continue;
      }
      if (!(bit & context_axes())) {
        diag_.error(idx.pos, "axis '" + idx.axis + "' is not available here");
        ok = false;
        continue;
      }
      if (targets & bit) {
        diag_.error(idx.pos, "axis '" + idx.axis + "' is used twice in this read of '" + e.text + "' (a diagonal is not available)");
        ok = false;
        continue;
      }
      targets |= bit;
      const int from = kvevict::axis_index(want[i]), to = kvevict::axis_index(bit);
      map = (map & ~(7 << (3 * from))) | (to << (3 * from));
      if (!(scope.bound & bit)) {
        diag_.error(idx.pos, "axis '" + idx.axis + "' is not bound here: declare it on the left side or reduce over it");
        ok = false;
        continue;
      }
      if (!idx.shift.empty()) {
        if (bit != kAxisT) {
          diag_.error(idx.pos, "only the token axis t can be shifted");
          ok = false;
        } else if (idx.shift != scope.window_var || !scope.in_window_body) {
          diag_.error(idx.pos, "'" + idx.shift + "' is not a window variable here (bind it with: mean(" + idx.shift + " in lo .. hi: ...))");
          ok = false;
        } else {
          int sign = idx.negative ? -1 : 1;
          if (scope.shift_sign != 0 && scope.shift_sign != sign) {
            diag_.error(idx.pos, "a window body must shift every token read the same way (all t + k or all t - k)");
            ok = false;
          }
          scope.shift_sign = sign;
        }
      } else if (bit == kAxisT && scope.in_window_body) {
        diag_.error(idx.pos, "inside the window over '" + scope.window_var + "', tokens must be read at t + " + scope.window_var);
        ok = false;
      }
    }
    if (ok && is_token_pair(axes) && ((map >> (3 * kvevict::kAxisIndexT)) & 7) != kvevict::kAxisIndexT) {
      // S[s, t] read as S[t, s]: a transposed token pair would need the whole T x T matrix.
      return fail(e.pos, "'" + e.text + "' is a token-pair tensor " + shape_name(axes) + "; read it with s and t in place (" +
                             e.text + shape_name(axes) + "), a transposed read would need the whole T x T matrix");
    }
    if (!ok) return error();
    if (is_random) {
      const int n = b_.rename(b_.random(), map);  // random[s]: the same numbers along s
      return Value{n, Type::Number, b_.node(n).shape};
    }
    if (is_randn) {
      const int n = b_.rename(b_.randn(), map);  // randn[e, d]: the transposed matrix
      return Value{n, Type::Number, b_.node(n).shape};
    }
    if (node < 0 && !kTensorSignals.count(e.text)) return error();  // the definition itself had errors
    if (node < 0) node = b_.load(kTensorSignals.at(e.text));
    node = b_.rename(node, map);
    return Value{node, type, b_.node(node).shape};
  }

  // read = NAME "[" index { "," index } "]" where NAME is a table: the indices are the table's
  // axes in order (docs/DSL.md §11, dsl/table_data.h): index -> a scalar NAME of the program (a
  // parameter, scalar signal or scalar definition); layer and kv_head -> the program's own
  // (kv_head along g in layer_weight programs); head -> h (query head kv_head * G + h); d and e ->
  // the channel axes d or e, each bound; c -> the model axis c, bound. No shifts, so no read can
  // leave the table.
  Value table_read(const Expr& e, Scope& scope, int index) {
    const TableData& tab = *opt_.tables[static_cast<size_t>(index)];
    std::vector<int> want;
    std::string table_axes;
    for (TableAxis a : kTableAxisOrder)
      if (tab.has_axis(a)) {
        want.push_back(static_cast<int>(a));
        table_axes += (table_axes.empty() ? "" : ", ") + std::string(kTableAxisNames[static_cast<int>(a)]);
      }
    if (e.indices.size() != want.size())
      return fail(e.pos, "table '" + e.text + "' has axes [" + table_axes + "] and takes " + std::to_string(want.size()) +
                             " indices, not " + std::to_string(e.indices.size()));
    bool along_g = false;
    int row = -1;               // the node of the index axis' scalar
    int map = rename_identity();  // d / e read at e / d
    unsigned channels = 0;      // the channel axes used, to refuse a diagonal
    for (size_t i = 0; i < want.size(); ++i) {
      const IndexTerm& idx = e.indices[i];
      const TableAxis tax = static_cast<TableAxis>(want[i]);
      const std::string found = idx.axis + (idx.shift.empty() ? "" : (idx.negative ? " - " : " + ") + idx.shift);
      auto wrong = [&](const std::string& expected) {
        return fail(idx.pos, "index " + std::to_string(i + 1) + " of table '" + e.text + "' must be " + expected + " (" + e.text +
                                 " has axes [" + table_axes + "]), found '" + found + "'");
      };
      if (!idx.shift.empty()) return wrong(tax == TableAxis::Index ? "a scalar name" : "'" + std::string(kTableAxisNames[want[i]]) + "'");
      switch (tax) {
        case TableAxis::Index: {
          if (axis(idx.axis)) return wrong("a scalar name (a parameter or a scalar definition)");
          Expr name_expr{};  // the index as the NAME it is
          name_expr.kind = ExprKind::Name;
          name_expr.pos = idx.pos;
          name_expr.text = idx.axis;
          const Value v = name(name_expr, scope);
          if (!v.ok()) return error();
          if (v.type != Type::Number || v.shape != 0)
            return fail(idx.pos, "index 1 of table '" + e.text + "' must be a number without axes (the row to read), found '" +
                                     idx.axis + "'");
          row = v.node;
          break;
        }
        case TableAxis::Layer:
          if (idx.axis != "layer") return wrong("'layer'");
          break;
        case TableAxis::KvHead:
          if (layer_ctx()) {
            if (idx.axis != "g")
              return fail(idx.pos, "table '" + e.text + "' is per KV head; in layer_weight programs index it along axis g, e.g. " +
                                       e.text + "[layer, g]");
            if (!(scope.bound & kAxisG)) return fail(idx.pos, "axis 'g' is not bound here: declare it on the left side or reduce over it");
            along_g = true;
          } else if (idx.axis != "kv_head") {
            return wrong("'kv_head'");
          }
          break;
        case TableAxis::Head:
          if (idx.axis != "h") return wrong("'h' (the query head of the group)");
          if (!(scope.bound & kAxisH)) return fail(idx.pos, "axis 'h' is not bound here: declare it on the left side or reduce over it");
          break;
        case TableAxis::D:
        case TableAxis::E: {
          const unsigned bit = axis(idx.axis) & (kAxisD | kAxisE);
          if (!bit) return wrong("'d' or 'e'");
          if (channels & bit)
            return fail(idx.pos, "axis '" + idx.axis + "' is used twice in this read of '" + e.text + "' (a diagonal is not available)");
          channels |= bit;
          if (!(scope.bound & bit))
            return fail(idx.pos, "axis '" + idx.axis + "' is not bound here: declare it on the left side or reduce over it");
          const int from = tax == TableAxis::D ? kvevict::kAxisIndexD : kvevict::kAxisIndexE;
          const int to = bit == kAxisD ? kvevict::kAxisIndexD : kvevict::kAxisIndexE;
          map = (map & ~(7 << (3 * from))) | (to << (3 * from));
          break;
        }
        case TableAxis::C:
          if (idx.axis != "c" || axis(idx.axis) != kvevict::kAxisC) return wrong("'c'");
          if (!(scope.bound & kvevict::kAxisC))
            return fail(idx.pos, "axis 'c' is not bound here: declare it on the left side or reduce over it");
          break;
      }
    }
    int n = b_.table(index, along_g, row);
    n = b_.rename(n, map);
    return Value{n, Type::Number, b_.node(n).shape};
  }

  Value unary(const Expr& e, Scope& scope) {
    Value a = check(*e.args[0], scope);
    if (!a.ok()) return error();
    if (e.text == "not") {
      if (a.type != Type::Bool) return fail(e.pos, std::string("'not' needs a boolean, found a ") + type_name(a.type));
      return Value{b_.unary(UnaryFn::Not, a.node), Type::Bool, a.shape};
    }
    if (a.type != Type::Number) return fail(e.pos, std::string("'-' needs a number, found a ") + type_name(a.type));
    return Value{b_.unary(UnaryFn::Neg, a.node), Type::Number, a.shape};
  }

  Value binary(const Expr& e, Scope& scope) {
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

  Value enum_compare(const Expr& e, const Value& a, const Value& b, bool equal) {
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

  Value call(const Expr& e, Scope& scope) {
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

  Value reduce(const Expr& e, Scope& scope) {
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
  Value sort(SortFn f, const Expr& e, Scope& scope) {
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
  bool window_bound(const Expr& e, int& out) {
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

  const CheckOptions& opt_;
  Diagnostics& diag_;
  ProgramBuilder b_;
  std::map<std::string, int> params_;
  std::map<std::string, Definition> defs_;
  bool reported_output_ = false;
  unsigned hidden_axes_ = 0;  // e, s where a parameter or definition has that name
};

}  // namespace

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
