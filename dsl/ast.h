#pragma once
// Syntax tree of one DSL program (a list of definitions). The checker fills the annotation
// fields (type, shape, resolved meaning); the lowering reads only checked trees.
#include <memory>
#include <string>
#include <vector>

#include "dsl/diagnostics.h"

namespace kvevict::dsl {

enum class ExprKind {
  Number,   // 1.5
  String,   // "avg" (only as an operand of == / != against an enum parameter)
  Name,     // gamma, T, t (a parameter, scalar signal, scalar definition or axis index)
  Read,     // A[h, q, t + k]   a tensor signal or a definition, indexed
  Unary,    // -x, not x
  Binary,   // x + y, x < y, x and y
  Call,     // exp(x), max(x, y), if(c, a, b)
  Reduce,   // mean(q: x), max(k in -2 .. 2: x[h, t + k])
};

// One index of a Read: an axis name, optionally shifted by a window variable (t + k, t - k).
struct IndexTerm {
  std::string axis;
  std::string shift;  // window variable name; empty when unshifted
  bool negative = false;
  FilePos pos;
};

// `name` (an axis: g, h, q, t) or `name in lo .. hi` (a window variable over token offsets).
struct Binder {
  std::string name;
  std::unique_ptr<struct Expr> lo, hi;  // null for axis binders
  FilePos pos;
};

enum class Type { Error, Number, Bool, Enum, String };

struct Expr {
  ExprKind kind;
  FilePos pos;
  std::string text;  // Name/Read/Call/Reduce: the name; Unary/Binary: the operator; String: contents
  double number = 0;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<IndexTerm> indices;  // Read
  std::vector<Binder> binders;     // Reduce
  int height = 1;                  // tree height, bounded by the parser

  // Filled by the checker.
  Type type = Type::Error;
  unsigned shape = 0;   // bit mask of axes (see lowered.h: AxisBit)
  int enum_param = -1;  // Type::Enum: which parameter
};

// `name[axes] = expr` or `name = expr`.
struct Definition {
  std::string name;
  FilePos pos;
  std::vector<std::string> axes;
  std::vector<FilePos> axis_pos;
  std::unique_ptr<Expr> value;
};

struct Program {
  std::vector<Definition> definitions;
};

}  // namespace kvevict::dsl
