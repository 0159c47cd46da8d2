#pragma once
// Budgets (spec §8 `budget.unit`). Units, as written on the command line and in eval configs:
//   "full"            no eviction
//   "10%"             a fraction of the prompt length S, per (layer, KV head)
//   "128"             an average of tokens per (layer, KV head), window and protected tokens
//                     included (CAKE's C, PyramidKV / KVCache-Factory's max_capacity_prompt)
//   "excl_window:96"  an average of tokens per (layer, KV head) NOT counting the policy's
//                     observation window W: the same as "96+W" (budgets that leave the window out)
//   "total:4096"      tokens over all layers and all KV heads together; must be a whole multiple
//                     of the model's KV heads (every KV head of a layer gets the same budget)
// Whatever the unit, the engine allocates an exact integer total per KV head over the layers
// (`total_per_kv_head`); protected tokens count inside.
#include <cstdint>
#include <string>

namespace kvevict {

// The model and policy facts a budget unit may need. Fraction and TokensPerHead need none.
struct BudgetGeometry {
  int n_layers = 0, n_kv_heads = 0;
  int window = 0;  // the policy's observation window W for this prompt
};

struct Budget {
  enum class Kind { Fraction, TokensPerHead, TokensPerHeadExclWindow, Total, Full };
  Kind kind = Kind::Full;
  double value = 0.0;  // fraction in (0, 1] or tokens (> 0; a whole number for Total)
  std::string text;    // as written, for reports ("10%", "128", "total:4096", "full")

  // Parses the units above; throws UsageError naming `what`. A token count below 1 per (layer, KV
  // head) is refused: it rounds to zero (like 0, which is refused too).
  static Budget parse(const std::string& text, const std::string& what = "budget");

  using Geometry = BudgetGeometry;
  // Average tokens per (layer, KV head), window included, for a prompt of `prompt_len` tokens
  // (never above prompt_len). Total and excl_window need the geometry (std::logic_error without).
  double tokens_per_head(int prompt_len, const Geometry& g = {}) const;
  // Exact integer budget per KV head summed over the layers: round(tokens_per_head x L), or, for
  // total:N, N / n_kv_heads (capped at prompt_len x L).
  int64_t total_per_kv_head(int prompt_len, const Geometry& g) const;
  // Throws UsageError when total:N is not a multiple of the KV heads, or less than one token per
  // (layer, KV head) (model facts, checked once the model is known).
  void check_model(int n_layers, int n_kv_heads, const std::string& what = "budget") const;
  // Throws UsageError when a token budget exceeds the prompt, or a percentage of it is less than
  // one token (callers that want clamping, like a sweep over many prompts, simply do not call this). Per-head units only: total:N is checked
  // by the engine against the model (check_model) and clamped like excl_window.
  void check_prompt(int prompt_len, const std::string& what = "budget") const;
};

}  // namespace kvevict
