#include "core/engine/budget.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "core/util/error.h"

namespace kvevict {
namespace {

// Budgets below one token per (layer, KV head) used to run and keep nothing (while 0 was refused).
constexpr const char* kRoundsToZero =
    "is less than one token per (layer, KV head): it rounds to zero and would keep nothing";

// number := decimal literal accepted by strtod, consuming the whole text (no sign, no spaces).
bool parse_number(const std::string& text, double* out) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.')) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

// budget := "full" | number "%" | number | "excl_window:" number | "total:" integer
Budget Budget::parse(const std::string& text, const std::string& what) {
  Budget b;
  b.text = text;
  if (text == "full") {
    b.kind = Kind::Full;
    b.value = 1.0;
    return b;
  }
  if (!text.empty() && text.back() == '%') {
    double percent = 0;
    if (!parse_number(text.substr(0, text.size() - 1), &percent) || percent <= 0 || percent > 100) {
      throw UsageError(what + ": '" + text + "' is not a percentage in (0%, 100%]");
    }
    b.kind = Kind::Fraction;
    b.value = percent / 100.0;
    return b;
  }
  static const std::string kTotal = "total:", kExcl = "excl_window:";
  if (text.rfind(kTotal, 0) == 0) {
    double n = 0;
    if (!parse_number(text.substr(kTotal.size()), &n) || n < 1 || n != std::floor(n) || n > 1e15)
      throw UsageError(what + ": '" + text + "': total:N needs a whole number N >= 1 of tokens over all layers and KV heads");
    b.kind = Kind::Total;
    b.value = n;
    return b;
  }
  if (text.rfind(kExcl, 0) == 0) {
    double n = 0;
    if (!parse_number(text.substr(kExcl.size()), &n) || n < 0)
      throw UsageError(what + ": '" + text + "': excl_window:N needs a number N >= 0 of tokens per (layer, KV head) besides the window");
    b.kind = Kind::TokensPerHeadExclWindow;
    b.value = n;
    return b;
  }
  double tokens = 0;
  if (!parse_number(text, &tokens) || tokens <= 0) {
    throw UsageError(what + ": '" + text + "' is not 'full', a percentage like '10%', a positive token count per (layer, KV head) "
                     "like '128', 'excl_window:N' or 'total:N'");
  }
  if (tokens < 1) throw UsageError(what + ": '" + text + "' " + kRoundsToZero);
  b.kind = Kind::TokensPerHead;
  b.value = tokens;
  return b;
}

double Budget::tokens_per_head(int prompt_len, const Geometry& g) const {
  const double s = std::max(0, prompt_len);
  switch (kind) {
    case Kind::Full: return s;
    case Kind::Fraction: return std::min(s, value * s);
    case Kind::TokensPerHead: return std::min(s, value);
    case Kind::TokensPerHeadExclWindow:
      if (g.n_layers <= 0) throw std::logic_error("budget " + text + ": the policy's window is needed");
      return std::min(s, value + std::max(0, g.window));
    case Kind::Total:
      if (g.n_layers <= 0 || g.n_kv_heads <= 0) throw std::logic_error("budget " + text + ": the model's geometry is needed");
      return std::min(s, value / (static_cast<double>(g.n_layers) * g.n_kv_heads));
  }
  return s;
}

int64_t Budget::total_per_kv_head(int prompt_len, const Geometry& g) const {
  if (kind == Kind::Total) {
    check_model(g.n_layers, g.n_kv_heads);
    const int64_t per_kv_head = static_cast<int64_t>(value) / g.n_kv_heads;
    return std::min<int64_t>(per_kv_head, static_cast<int64_t>(std::max(0, prompt_len)) * g.n_layers);
  }
  return std::llround(tokens_per_head(prompt_len, g) * g.n_layers);
}

void Budget::check_model(int n_layers, int n_kv_heads, const std::string& what) const {
  if (kind != Kind::Total) return;
  if (n_layers <= 0 || n_kv_heads <= 0) throw std::logic_error("budget " + text + ": the model's geometry is needed");
  if (static_cast<int64_t>(value) % n_kv_heads != 0)
    throw UsageError(what + ": " + text + " is not a multiple of the model's " + std::to_string(n_kv_heads) +
                     " KV heads (every KV head of a layer gets the same budget; total:N counts all of them)");
  if (value < static_cast<double>(n_layers) * n_kv_heads)
    throw UsageError(what + ": " + text + " over the model's " + std::to_string(n_layers) + " layers x " +
                     std::to_string(n_kv_heads) + " KV heads " + kRoundsToZero);
}

void Budget::check_prompt(int prompt_len, const std::string& what) const {
  if (kind == Kind::Fraction && value * std::max(0, prompt_len) < 1) {
    throw UsageError(what + ": budget " + text + " of a " + std::to_string(prompt_len) + "-token prompt " + kRoundsToZero);
  }
  if ((kind == Kind::TokensPerHead || kind == Kind::TokensPerHeadExclWindow) && value > prompt_len) {
    throw UsageError(what + ": budget " + text + " tokens per head is above the prompt length (" +
                     std::to_string(prompt_len) + " tokens)");
  }
}

}  // namespace kvevict
