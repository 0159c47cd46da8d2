#pragma once
// A deterministic stand-in for a model, selected with `model: fake:` in a config (tests, CI smoke
// runs of the store and CLI). Tokens are whitespace words. A policy keeps the first 4 words, the
// most recent words, and a seeded random share of the rest that depends on the policy's label, up
// to the budget; the "answer" is every reference whose words all survived, else "unknown".
// It measures nothing about real eviction quality; it exercises the sweep, store and CLI.
// Spec: "fake:" or "fake:delay_ms=N" (sleep N ms per run, so tests can kill a run mid-way).
#include "evals/sample_runner.h"

namespace kvevict::evals {

class FakeRunner : public SampleRunner {
 public:
  explicit FakeRunner(const std::string& spec);
  std::string device() const override { return "fake"; }
  std::string model_hash() override;
  int count_tokens(std::string_view text) override;
  int context_length() const override { return 0; }
  int positions_needed(const Sample&) override { return 0; }
  void prepare(const std::vector<PolicyChoice>& policies) override;
  void begin_sample(const Sample& sample) override;
  RunOutcome run(const PolicyChoice& policy, const Budget& budget) override;
  int64_t prefill_count() const override { return prefills_; }

 private:
  std::string spec_;
  int delay_ms_ = 0;
  Sample sample_;
  std::vector<std::string> words_;
  int64_t prefills_ = 0;
};

}  // namespace kvevict::evals
