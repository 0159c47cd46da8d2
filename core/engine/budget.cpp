#include "core/engine/budget.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/util/error.h"

namespace kvevict {
namespace {

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

// budget := "full" | number "%" | number
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
  double tokens = 0;
  if (!parse_number(text, &tokens) || tokens <= 0) {
    throw UsageError(what + ": '" + text + "' is not 'full', a percentage like '10%' or a positive token count like '128'");
  }
  b.kind = Kind::TokensPerHead;
  b.value = tokens;
  return b;
}

double Budget::tokens_per_head(int prompt_len) const {
  const double s = std::max(0, prompt_len);
  switch (kind) {
    case Kind::Full: return s;
    case Kind::Fraction: return std::min(s, value * s);
    case Kind::TokensPerHead: return std::min(s, value);
  }
  return s;
}

void Budget::check_prompt(int prompt_len, const std::string& what) const {
  if (kind == Kind::TokensPerHead && value > prompt_len) {
    throw UsageError(what + ": budget " + text + " tokens per head is above the prompt length (" +
                     std::to_string(prompt_len) + " tokens)");
  }
}

}  // namespace kvevict
