// The checker: signal and table reads; the class in checker_impl.h.
#include "dsl/checker_impl.h"

namespace kvevict::dsl::checker_detail {

// The indices of a tensor read of axes `axes`, one per axis of `want` (their bits in order): each an axis of the same kind,
// available in this program, bound, not used twice, and only t shifted, by the active window
// variable, the same way throughout the window body. Records each index's axis in `map` (the
// rename from the tensor's axes); false after reporting every wrong index.
bool Checker::check_read_indices(const Expr& e, Scope& scope, unsigned axes, const std::vector<unsigned>& want,
                                 int& map) {
  bool ok = true;
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
  return ok;
}

// read = NAME "[" index { "," index } "]" where NAME is a tensor signal, random, randn or a
// tensor definition of the program: the indices name its axes in order (check_read_indices).
Value Checker::read(const Expr& e, Scope& scope) {
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
  int map = rename_identity();
  const bool ok = check_read_indices(e, scope, axes, want, map);
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

// A table's index axis read at `idx`, a NAME of the program: its node, a number without axes;
// -1 (reported) otherwise.
int Checker::table_row(const Expr& e, const IndexTerm& idx, Scope& scope) {
  Expr name_expr{};  // the index as the NAME it is
  name_expr.kind = ExprKind::Name;
  name_expr.pos = idx.pos;
  name_expr.text = idx.axis;
  const Value v = name(name_expr, scope);
  if (!v.ok()) return -1;
  if (v.type != Type::Number || v.shape != 0) {
    fail(idx.pos, "index 1 of table '" + e.text + "' must be a number without axes (the row to read), found '" + idx.axis +
                      "'");
    return -1;
  }
  return v.node;
}

// read = NAME "[" index { "," index } "]" where NAME is a table: the indices are the table's
// axes in order (docs/DSL.md §11, dsl/table_data.h): index -> a scalar NAME of the program (a
// parameter, scalar signal or scalar definition); layer and kv_head -> the program's own
// (kv_head along g in layer_weight programs); head -> h (query head kv_head * G + h); d and e ->
// the channel axes d or e, each bound; c -> the model axis c, bound. No shifts, so no read can
// leave the table.
Value Checker::table_read(const Expr& e, Scope& scope, int index) {
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
    if (!idx.shift.empty()) return wrong(tax == TableAxis::Index ? "a scalar name" : quoted(kTableAxisNames[want[i]]));
    switch (tax) {
      case TableAxis::Index:
        if (axis(idx.axis)) return wrong("a scalar name (a parameter or a scalar definition)");
        row = table_row(e, idx, scope);
        if (row < 0) return error();
        break;
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

}  // namespace kvevict::dsl::checker_detail
