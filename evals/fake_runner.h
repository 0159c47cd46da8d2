#pragma once
// A deterministic stand-in for a model, selected with `model: fake:` in a config (tests, CI smoke
// runs of the store and CLI). Tokens are whitespace words. A policy keeps the first 4 words, the
// most recent words, and a seeded random share of the rest that depends on the policy's label, up
// to the budget; the "answer" is every reference whose words all survived, else "unknown".
// It measures nothing about real eviction quality; it exercises the sweep, store, CLI and replay.
// Its prompt text is the context (plus the question when query-aware); its policy record is the
// text of the file the policy names, when it names one, with the overrides as written; its
// eviction report is one layer with one head whose kept positions are word indices.
// Spec: "fake:" or "fake:delay_ms=N" (sleep N ms per run, so tests can kill a run mid-way).
// Its device is the CPU's for the `prefill:` mode (auto resolves to shared); in per_run it counts a
// prefill per evicting run, as the real runner does, so the sweep's accounting can be tested.
#include <map>

#include "evals/sample_runner.h"

namespace kvevict::evals {

class FakeRunner : public SampleRunner {
 public:
  explicit FakeRunner(const std::string& spec, PrefillMode prefill = PrefillMode::Auto);
  std::string device() const override { return "fake"; }
  std::string model_hash() override;
  int count_tokens(std::string_view text) override;
  int context_length() const override { return 0; }
  int positions_needed(const Sample&) override { return 0; }
  void prepare(const std::vector<PolicyChoice>& policies) override;
  PolicySource policy_source(const PolicyChoice& policy) const override { return sources_.at(policy.label); }
  PromptText prompt_text(const Sample& sample) override;
  void begin_prompt(const Sample& sample, const PromptText& text) override;
  RunOutcome run(const PolicyChoice& policy, const Budget& budget) override;
  const EvictionReport* eviction_report() const override { return evicted_ ? &report_ : nullptr; }
  int gqa_group() const override { return 1; }
  int64_t prefill_count() const override { return prefills_; }
  int64_t run_prefill_count() const override { return run_prefills_; }
  PrefillMode prefill_mode() const override { return prefill_; }

 private:
  void record_report(const PolicyChoice& policy, const Budget& budget, const std::vector<bool>& kept, int keep);
  std::string spec_;
  int delay_ms_ = 0;
  Sample sample_;
  std::vector<std::string> words_;
  int64_t prefills_ = 0, run_prefills_ = 0;
  PrefillMode prefill_;
  std::map<std::string, PolicySource> sources_;  // by label
  EvictionReport report_;
  bool evicted_ = false;
};

}  // namespace kvevict::evals
