#pragma once
// The checker's class (check_program, check_setting: dsl/checker.h), shared by its three source
// files: checker.cpp (programs, definitions, names), checker_reads.cpp (signal and table reads) and
// checker_calls.cpp (operators, calls, reductions, sorts, window bounds). Nothing else includes it.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "dsl/builtin_names.h"
#include "dsl/checker.h"
#include "dsl/matrix_ops.h"
#include "dsl/program_builder.h"
#include "dsl/sort_ops.h"

namespace kvevict::dsl::checker_detail {

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

// 'name', built by appending (GCC 12 warns falsely, -Wrestrict, on "'" + std::string).
inline std::string quoted(std::string_view name) {
  std::string q;
  q.reserve(name.size() + 2);
  q += '\'';
  q += name;
  q += '\'';
  return q;
}

inline std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}


inline const char* type_name(Type t) {
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

  // A program of the context's output (checker.cpp), or one setting expression.
  LoweredProgram program(const Program& p, FilePos program_pos);
  LoweredProgram setting(const Expr& e, bool want_bool);

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

  // checker.cpp: definitions, the expression dispatch, names.
  int definition(const ::kvevict::dsl::Definition& d);
  Value check(const Expr& e, Scope& scope);
  Value check_expr(const Expr& e, Scope& scope);
  Value name(const Expr& e, Scope& scope);

  // checker_reads.cpp: reads of signals, definitions and tables.
  unsigned signal_shape(TensorSignal s) const { return tensor_signal_shape(s) | (layer_ctx() ? kAxisG : 0u); }
  static std::string index_hint(unsigned axes) { return shape_name(axes); }
  Value read(const Expr& e, Scope& scope);
  bool check_read_indices(const Expr& e, Scope& scope, unsigned axes, const std::vector<unsigned>& want, int& map);
  Value table_read(const Expr& e, Scope& scope, int index);
  int table_row(const Expr& e, const IndexTerm& idx, Scope& scope);

  // checker_calls.cpp: operators, calls, reductions, sorts, window bounds.
  Value unary(const Expr& e, Scope& scope);
  Value binary(const Expr& e, Scope& scope);
  Value enum_compare(const Expr& e, const Value& a, const Value& b, bool equal);
  Value call(const Expr& e, Scope& scope);
  Value reduce(const Expr& e, Scope& scope);
  Value sort(SortFn f, const Expr& e, Scope& scope);
  bool window_bound(const Expr& e, int& out);

  const CheckOptions& opt_;
  Diagnostics& diag_;
  ProgramBuilder b_;
  std::map<std::string, int> params_;
  std::map<std::string, Definition> defs_;
  bool reported_output_ = false;
  unsigned hidden_axes_ = 0;  // e, s where a parameter or definition has that name
};

}  // namespace kvevict::dsl::checker_detail
