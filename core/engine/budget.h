#pragma once
// Budgets. "10%" is a fraction of the prompt length; a plain number like "128" is an average number
// of tokens per (layer, KV head), as in the CAKE and SnapKV papers. Protected tokens count inside.
#include <string>

namespace kvevict {

struct Budget {
  enum class Kind { Fraction, TokensPerHead, Full };
  Kind kind = Kind::Full;
  double value = 0.0;  // fraction in (0, 1] or tokens (> 0)
  std::string text;    // as written, for reports ("10%", "128", "full")

  // Parses "full", "N%" (0 < N <= 100) or a positive number; throws UsageError naming `what`.
  static Budget parse(const std::string& text, const std::string& what = "budget");
  // Average tokens per (layer, KV head) for a prompt of `prompt_len` tokens (never above prompt_len).
  double tokens_per_head(int prompt_len) const;
  // Throws UsageError when a token budget exceeds the prompt (callers that want clamping, like a
  // sweep over many prompts, simply do not call this).
  void check_prompt(int prompt_len, const std::string& what = "budget") const;
};

}  // namespace kvevict
