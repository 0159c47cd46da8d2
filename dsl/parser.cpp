#include "dsl/parser.h"

#include <algorithm>
#include <set>

#include "dsl/lexer.h"

namespace kvevict::dsl {
namespace {

// Thrown to abandon the current statement after its first syntax error; the statement loop
// catches it and skips to the next line.
struct SyntaxError {};

// Nesting guard: a file from a stranger cannot exhaust the stack.
constexpr int kMaxDepth = 200;

// The reducers and the sort operations (dsl/sort_ops.h), which share the binder syntax.
const std::set<std::string> kReducers = {"sum", "mean", "var", "max", "min", "entropy", "rank", "sorted_cumsum", "quantile"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const TextOrigin& origin, Diagnostics& diag)
      : toks_(std::move(tokens)), origin_(origin), diag_(diag) {}

  // program = { NEWLINE } { definition { NEWLINE } } END ;
  Program program() {
    Program p;
    skip_newlines();
    while (peek().kind != Tok::End) {
      Definition d;
      try {
        definition(d);
        p.definitions.push_back(std::move(d));
      } catch (const SyntaxError&) {
        // Keep the name of a definition whose value is broken (value = null), so later uses of
        // it are not reported again as unknown names.
        if (d.name.size() && d.value == nullptr && assigned_) p.definitions.push_back(std::move(d));
        while (peek().kind != Tok::Newline && peek().kind != Tok::End) ++pos_;
      }
      skip_newlines();
    }
    return p;
  }

  // single_expression = expr { NEWLINE } END ;
  std::unique_ptr<Expr> single() {
    try {
      skip_newlines();
      auto e = expr();
      skip_newlines();
      if (peek().kind != Tok::End) fail(peek(), "unexpected " + describe(peek()) + " after the expression");
      return e;
    } catch (const SyntaxError&) {
      return nullptr;
    }
  }

 private:
  const Token& peek(int ahead = 0) const {
    size_t i = pos_ + ahead;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  const Token& next() { const Token& t = peek(); if (pos_ < toks_.size() - 1) ++pos_; return t; }
  bool accept(Tok k) { if (peek().kind == k) { next(); return true; } return false; }
  FilePos where(const Token& t) const { return origin_.map(t.line, t.col); }
  static std::string describe(const Token& t) {
    if (t.kind == Tok::Ident) return "name '" + t.text + "'";
    if (t.kind == Tok::Number) return "number " + t.text;
    if (t.kind == Tok::String) return "string \"" + t.text + "\"";
    return token_name(t.kind);
  }
  [[noreturn]] void fail(const Token& t, const std::string& message) {
    diag_.error(where(t), message);
    throw SyntaxError{};
  }
  const Token& expect(Tok k, const std::string& context) {
    if (peek().kind != k) fail(peek(), std::string("expected ") + token_name(k) + " " + context + ", found " + describe(peek()));
    return next();
  }
  void skip_newlines() { while (peek().kind == Tok::Newline) next(); }
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser, const Token& at) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(at, "expression nested too deeply (more than 200 levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };
  std::unique_ptr<Expr> make(ExprKind kind, const Token& at, std::string text = "") {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = where(at);
    e->text = std::move(text);
    return e;
  }

  // definition = name [ "[" name { "," name } "]" ] "=" expr ( NEWLINE | END ) ;
  void definition(Definition& d) {
    assigned_ = false;
    const Token& name = peek();
    if (name.kind != Tok::Ident) fail(name, "expected a definition 'name[axes] = expression', found " + describe(name));
    next();
    d.name = name.text;
    d.pos = where(name);
    if (accept(Tok::LBracket)) {
      do {
        const Token& axis = expect(Tok::Ident, "(an axis name) in the definition's index list");
        d.axes.push_back(axis.text);
        d.axis_pos.push_back(where(axis));
      } while (accept(Tok::Comma));
      expect(Tok::RBracket, "after the definition's axes");
    }
    if (peek().kind != Tok::Assign) {
      if (peek().kind == Tok::EqEq) fail(peek(), "expected '=' in a definition, found '==' (comparison)");
      fail(peek(), "expected '=' after '" + d.name + "', found " + describe(peek()));
    }
    next();
    assigned_ = true;
    auto value = expr();
    if (peek().kind != Tok::Newline && peek().kind != Tok::End)
      fail(peek(), "unexpected " + describe(peek()) + " after the end of the definition of '" + d.name + "'");
    d.value = std::move(value);
  }

  // expr = or_expr ;
  std::unique_ptr<Expr> expr() {
    DepthGuard guard(*this, peek());
    return or_expr();
  }

  // or_expr = and_expr { "or" and_expr } ;
  std::unique_ptr<Expr> or_expr() {
    auto left = and_expr();
    while (peek().kind == Tok::Ident && peek().text == "or") {
      const Token& op = next();
      left = binary(op, "or", std::move(left), and_expr());
    }
    return left;
  }

  // and_expr = not_expr { "and" not_expr } ;
  std::unique_ptr<Expr> and_expr() {
    auto left = not_expr();
    while (peek().kind == Tok::Ident && peek().text == "and") {
      const Token& op = next();
      left = binary(op, "and", std::move(left), not_expr());
    }
    return left;
  }

  // not_expr = "not" not_expr | comparison ;
  std::unique_ptr<Expr> not_expr() {
    if (peek().kind == Tok::Ident && peek().text == "not") {
      const Token& op = next();
      DepthGuard guard(*this, op);
      auto e = make(ExprKind::Unary, op, "not");
      e->args.push_back(not_expr());
      return finish(std::move(e), op);
    }
    return comparison();
  }

  // comparison = additive [ ( "<" | "<=" | ">" | ">=" | "==" | "!=" ) additive ] ;
  std::unique_ptr<Expr> comparison() {
    auto left = additive();
    Tok k = peek().kind;
    if (k == Tok::Lt || k == Tok::Le || k == Tok::Gt || k == Tok::Ge || k == Tok::EqEq || k == Tok::NotEq) {
      const Token& op = next();
      left = binary(op, op.text, std::move(left), additive());
      Tok k2 = peek().kind;
      if (k2 == Tok::Lt || k2 == Tok::Le || k2 == Tok::Gt || k2 == Tok::Ge || k2 == Tok::EqEq || k2 == Tok::NotEq)
        fail(peek(), "comparisons do not chain; combine them with 'and'");
    }
    return left;
  }

  // additive = term { ( "+" | "-" ) term } ;
  std::unique_ptr<Expr> additive() {
    auto left = term();
    while (peek().kind == Tok::Plus || peek().kind == Tok::Minus) {
      const Token& op = next();
      left = binary(op, op.text, std::move(left), term());
    }
    return left;
  }

  // term = unary { ( "*" | "/" ) unary } ;
  std::unique_ptr<Expr> term() {
    auto left = unary();
    while (peek().kind == Tok::Star || peek().kind == Tok::Slash) {
      const Token& op = next();
      left = binary(op, op.text, std::move(left), unary());
    }
    return left;
  }

  // unary = "-" unary | power ;
  std::unique_ptr<Expr> unary() {
    if (peek().kind == Tok::Minus) {
      const Token& op = next();
      DepthGuard guard(*this, op);
      auto e = make(ExprKind::Unary, op, "-");
      e->args.push_back(unary());
      return finish(std::move(e), op);
    }
    return power();
  }

  // power = primary [ "^" unary ] ;          (right-associative: a ^ b ^ c = a ^ (b ^ c))
  std::unique_ptr<Expr> power() {
    auto base = primary();
    if (peek().kind == Tok::Caret) {
      const Token& op = next();
      DepthGuard guard(*this, op);
      return binary(op, "^", std::move(base), unary());
    }
    return base;
  }

  // primary = NUMBER | STRING | "(" expr ")" | reduction | call | read | NAME ;
  std::unique_ptr<Expr> primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::Number: { next(); auto e = make(ExprKind::Number, t); e->number = t.number; return e; }
      case Tok::String: { next(); return make(ExprKind::String, t, t.text); }
      case Tok::LParen: {
        next();
        auto e = expr();
        expect(Tok::RParen, "to close '('");
        return e;
      }
      case Tok::Ident: {
        if (t.text == "and" || t.text == "or" || t.text == "not" || t.text == "in")
          fail(t, "expected an operand, found keyword '" + t.text + "'");
        next();
        if (peek().kind == Tok::LParen) {
          if (kReducers.count(t.text) && is_reduction_ahead()) return reduction(t);
          return call(t);
        }
        if (peek().kind == Tok::LBracket) return read(t);
        return make(ExprKind::Name, t, t.text);
      }
      default:
        fail(t, "expected an operand, found " + describe(t));
    }
  }

  // A reduction's argument list starts with binders and a ':' at bracket depth 0.
  bool is_reduction_ahead() const {
    int depth = 0;
    for (size_t i = pos_ + 1; i < toks_.size(); ++i) {
      Tok k = toks_[i].kind;
      if (k == Tok::LParen || k == Tok::LBracket) ++depth;
      else if (k == Tok::RParen || k == Tok::RBracket) { if (depth-- == 0) return false; }
      else if (k == Tok::Colon && depth == 0) return true;
      else if (k == Tok::End || k == Tok::Newline) return false;
    }
    return false;
  }

  // reduction = reducer "(" binder { "," binder } ":" expr { "," expr } ")" ;
  //   (* the extra operands: quantile's level; the checker counts them per reducer *)
  // binder    = NAME [ "in" expr ".." expr ] ;
  std::unique_ptr<Expr> reduction(const Token& name) {
    DepthGuard guard(*this, name);
    auto e = make(ExprKind::Reduce, name, name.text);
    expect(Tok::LParen, "after the reduction name");
    do {
      const Token& b = expect(Tok::Ident, "(an axis or a window variable) in the reduction's binder list");
      Binder binder;
      binder.name = b.text;
      binder.pos = where(b);
      if (peek().kind == Tok::Ident && peek().text == "in") {
        next();
        binder.lo = additive();
        expect(Tok::DotDot, "between the window bounds (lo .. hi)");
        binder.hi = additive();
      }
      e->binders.push_back(std::move(binder));
    } while (accept(Tok::Comma));
    expect(Tok::Colon, "after the reduction's binders");
    e->args.push_back(expr());
    while (accept(Tok::Comma)) e->args.push_back(expr());
    expect(Tok::RParen, "to close the reduction");
    return finish(std::move(e), name);
  }

  // call = NAME "(" [ expr { "," expr } ] ")" ;
  std::unique_ptr<Expr> call(const Token& name) {
    DepthGuard guard(*this, name);
    auto e = make(ExprKind::Call, name, name.text);
    expect(Tok::LParen, "after the function name");
    if (peek().kind != Tok::RParen) {
      do e->args.push_back(expr());
      while (accept(Tok::Comma));
    }
    expect(Tok::RParen, "to close the argument list of '" + name.text + "'");
    return finish(std::move(e), name);
  }

  // read  = NAME "[" index { "," index } "]" ;
  // index = NAME [ ( "+" | "-" ) NAME ] ;   (* an axis of the tensor's kind (g, h, q, d|e, s|t); only t is shifted *)
  std::unique_ptr<Expr> read(const Token& name) {
    auto e = make(ExprKind::Read, name, name.text);
    expect(Tok::LBracket, "");
    do {
      const Token& a = peek();
      if (a.kind != Tok::Ident)
        fail(a, "an index must be an axis name (g, h, q, d, e, s, t), optionally shifted by a window variable (t + k); found " + describe(a));
      next();
      IndexTerm idx;
      idx.axis = a.text;
      idx.pos = where(a);
      if (peek().kind == Tok::Plus || peek().kind == Tok::Minus) {
        idx.negative = next().kind == Tok::Minus;
        const Token& s = peek();
        if (s.kind != Tok::Ident)
          fail(s, "an index may only be shifted by a window variable bound with 'k in lo .. hi'; found " + describe(s));
        next();
        idx.shift = s.text;
      }
      e->indices.push_back(std::move(idx));
    } while (accept(Tok::Comma));
    expect(Tok::RBracket, "to close the index list of '" + name.text + "'");
    return e;
  }

  std::unique_ptr<Expr> binary(const Token& op, std::string text, std::unique_ptr<Expr> l, std::unique_ptr<Expr> r) {
    auto e = make(ExprKind::Binary, op, std::move(text));
    e->args.push_back(std::move(l));
    e->args.push_back(std::move(r));
    return finish(std::move(e), op);
  }

  // Long operator chains build deep trees without deep parser recursion; the checker and the
  // lowering recurse over the tree, so its height is bounded here.
  std::unique_ptr<Expr> finish(std::unique_ptr<Expr> e, const Token& at) {
    int h = 0;
    for (const auto& a : e->args) h = std::max(h, a->height);
    for (const auto& b : e->binders) {
      if (b.lo) h = std::max(h, b.lo->height);
      if (b.hi) h = std::max(h, b.hi->height);
    }
    e->height = h + 1;
    if (e->height > kMaxDepth) fail(at, "expression nested too deeply (more than 200 levels)");
    return e;
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool assigned_ = false;  // the current definition got as far as its '='
  TextOrigin origin_;
  Diagnostics& diag_;
};

}  // namespace

Program parse_program(const std::string& text, const TextOrigin& origin, Diagnostics& diag) {
  Parser p(lex(text, origin, diag), origin, diag);
  return p.program();
}

std::unique_ptr<Expr> parse_expression(const std::string& text, const TextOrigin& origin, Diagnostics& diag) {
  size_t before = diag.count();
  Parser p(lex(text, origin, diag), origin, diag);
  auto e = p.single();
  return diag.count() == before ? std::move(e) : nullptr;
}

}  // namespace kvevict::dsl
