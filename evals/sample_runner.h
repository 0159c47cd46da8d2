#pragma once
// "Run one sample under many policies": the seam between the sweep (evals/runner.h) and a model.
// `begin_sample` prefills ONCE with the full cache, recording every signal the sweep's policies
// need, and keeps a snapshot; each `run` restores the snapshot, applies one (policy, budget),
// appends the question when the sample is question-agnostic, and decodes greedily.
// Implementations: the real decoder (evals/model_runner.cpp) and a deterministic fake for tests
// (evals/fake_runner.h).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/budget.h"
#include "evals/config.h"
#include "evals/tasks/sample.h"

namespace kvevict::evals {

struct RunOutcome {
  std::string prediction;
  double kept_ratio = 1.0;        // entries kept / entries before eviction
  int64_t kv_bytes = 0;           // cache bytes after eviction (and after decoding)
  int64_t kv_bytes_full = 0;      // cache bytes of the full prompt
  double ttft_ms = 0;             // shared prefill + eviction + question + first token
  double decode_tok_s = 0;        // tokens per second after the first
  // Fidelity samples only (see evals/tasks/fidelity.cpp).
  double kl = 0, top1_agreement = 0, greedy_agreement = 0;
  nlohmann::json extra = nlohmann::json::object();
};

class SampleRunner {
 public:
  virtual ~SampleRunner() = default;
  virtual std::string device() const = 0;
  virtual std::string model_hash() = 0;      // sha256 of the model file (or of the fake's spec)
  virtual int count_tokens(std::string_view text) = 0;
  // The model's context in tokens (0: unbounded, the fake), checked against the config's task
  // lengths before any sample runs (check_config_for_model).
  virtual int context_length() const = 0;
  // Cache positions the sample uses: its prompt, question tail and answer (or continuation). The
  // sweep refuses a sample needing more than context_length() before the run is created.
  virtual int positions_needed(const Sample& sample) = 0;
  // Loads and checks every policy once before any sample (throws UsageError on a bad policy).
  virtual void prepare(const std::vector<PolicyChoice>& policies) = 0;
  virtual void begin_sample(const Sample& sample) = 0;
  virtual RunOutcome run(const PolicyChoice& policy, const Budget& budget) = 0;
  // Full-cache prefills done so far (the sweep does one per sample, never one per policy x budget).
  virtual int64_t prefill_count() const = 0;
};

// Chooses the runner for `config.model`: "fake:..." gives the fake, anything else the real decoder.
std::unique_ptr<SampleRunner> make_sample_runner(const EvalConfig& config);
// Static check of one policy entry, used while validating a config (before any model is loaded).
void check_policy_choice(const std::string& model, const PolicyChoice& choice);

}  // namespace kvevict::evals
