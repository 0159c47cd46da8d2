#include "cli/policy_options.h"

#include "core/util/error.h"
#include "jit/scoring_backend.h"

namespace kvevict::cli {

void PolicyOptions::add_to(CLI::App& app) {
  app.add_option("--policy", policy, "Eviction policy: a built-in name, a name in --policy-path, or a policy file");
  app.add_option("--budget", budget, "Cache budget: \"full\", \"N%\" of the prompt, N tokens per (layer, KV head) window included, "
                 "\"excl_window:N\" (per layer and KV head besides the window) or \"total:N\" (all layers and KV heads)");
  app.add_option("--set", set, "Policy parameter override name=value (repeatable)")->allow_extra_args(false);
  app.add_option("--policy-path", policy_path, "Extra directory searched for policy names (repeatable)");
  app.add_option("--scoring", scoring, "How policy scores are computed: auto (cuda on a CUDA device, else interpreter), "
                 "interpreter, host (the generated kernels compiled for the CPU) or cuda (NVRTC kernels on the GPU)")
      ->capture_default_str();
}

std::map<std::string, std::string> PolicyOptions::overrides() const {
  std::map<std::string, std::string> out;
  for (const std::string& s : set) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--set " + s + ": expected name=value (for example --set window=32)");
    const std::string name = s.substr(0, eq);
    if (!out.emplace(name, s.substr(eq + 1)).second)
      throw UsageError("--set " + s + ": parameter '" + name + "' is set twice");
  }
  return out;
}

std::unique_ptr<PolicyProgram> PolicyOptions::load(const jit::DeviceChoice& device,
                                                   jit::ScoringBackend* resolved) const {
  if (!set.empty() && policy.empty()) throw UsageError("--set needs --policy");
  const jit::ScoringBackend backend = jit::resolve_scoring(scoring, device, "--scoring");
  if (resolved) *resolved = backend;
  return jit::load_scored_policy(policy, overrides(), policy_path, backend, device);
}

Budget PolicyOptions::parsed_budget(int prompt_len) const {
  if (budget.empty()) throw UsageError("--policy needs --budget (\"full\", \"N%\", tokens per layer and KV head, \"excl_window:N\" or \"total:N\")");
  const Budget b = Budget::parse(budget, "--budget");
  if (prompt_len >= 0) b.check_prompt(prompt_len, "--budget");
  return b;
}

}  // namespace kvevict::cli
