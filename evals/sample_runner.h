#pragma once
// "Run one sample under many policies": the seam between the sweep (evals/runner.h) and a model.
// `begin_sample` prefills ONCE with the full cache, recording every signal the sweep's policies
// need, and keeps a snapshot; each `run` restores the snapshot, applies one (policy, budget),
// appends the question when the sample is question-agnostic, and decodes greedily. In the per_run
// prefill mode (EvalConfig::prefill) an evicting run prefills the prompt again under its policy
// instead of evicting the snapshot; the shared prefill still serves the full cache and fidelity.
// `prompt_text` is the exact text the model sees for a sample (stored with every result);
// `begin_prompt` runs a sample from such a text (a replay feeds the stored one back).
// Implementations: the real decoder (evals/model_runner.cpp) and a deterministic fake for tests
// (evals/fake_runner.h).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/budget.h"
#include "core/engine/engine.h"
#include "evals/config.h"
#include "evals/prompt_text.h"
#include "evals/stored_content.h"
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
  // How policies are scored (jit/scoring_backend.h names: interpreter, host, cuda); "" when this
  // runner scores no policy file (the fake model, hand-written evictors in tests).
  virtual std::string scoring() const { return ""; }
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
  // After prepare: the record of a prepared policy as the results store keeps it.
  virtual PolicySource policy_source(const PolicyChoice& policy) const = 0;
  // The text the model sees for `sample` under this runner's chat template.
  virtual PromptText prompt_text(const Sample& sample) = 0;
  // Prefills `text` (which prompt_text(sample) gave, now or in an earlier process); `sample`
  // supplies the decoding fields (query_aware, fidelity, max_new_tokens, greedy_tokens).
  virtual void begin_prompt(const Sample& sample, const PromptText& text) = 0;
  void begin_sample(const Sample& sample) { begin_prompt(sample, prompt_text(sample)); }
  virtual RunOutcome run(const PolicyChoice& policy, const Budget& budget) = 0;
  // What the latest run() kept per layer and head after the prefill eviction (kvevict replay prints
  // it); null for the full budget or a runner that does not report.
  virtual const EvictionReport* eviction_report() const = 0;
  // Query heads per KV head (1 without GQA): how an unfolded report's heads map to KV heads.
  virtual int gqa_group() const = 0;
  // Full-cache prefills done so far: one per sample (begin_prompt), never one per policy x budget.
  virtual int64_t prefill_count() const = 0;
  // Prefills that one (policy, budget) ran for itself so far: every evicting run's in per_run mode,
  // a block-prefill policy's in either mode (twice for a fidelity sample, which evicts twice).
  virtual int64_t run_prefill_count() const { return 0; }
  // The resolved `prefill:` mode of every run() (Shared or PerRun, never Auto), recorded per run.
  virtual PrefillMode prefill_mode() const { return PrefillMode::Shared; }
};

// Chooses the runner for `config.model`: "fake:..." gives the fake, anything else the real decoder.
std::unique_ptr<SampleRunner> make_sample_runner(const EvalConfig& config);
// Static check of one policy entry, used while validating a config (before any model is loaded).
void check_policy_choice(const std::string& model, const PolicyChoice& choice);

}  // namespace kvevict::evals
