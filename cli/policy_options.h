#pragma once
// Options shared by the commands that run a policy (inspect, generate): --policy, --budget,
// --set name=value (repeatable), --policy-path DIR (repeatable), --scoring (the scoring backend,
// jit/scoring_backend.h). Every problem with them is a
// UsageError (exit 2) naming the option and what is wrong.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/engine/budget.h"
#include "core/engine/policy_program.h"
#include "jit/device.h"
#include "jit/scoring_backend.h"

namespace kvevict::cli {

struct PolicyOptions {
  std::string policy;
  std::string budget;
  std::vector<std::string> set;
  std::vector<std::string> policy_path;
  std::string scoring = "auto";

  bool enabled() const { return !policy.empty(); }
  // Declares the options on `app`.
  void add_to(CLI::App& app);
  // "name=value" pairs; throws UsageError on a missing '=' or an empty name, or a name given twice.
  std::map<std::string, std::string> overrides() const;
  // Loads and compiles the policy for the --scoring backend on `device`, where the decoder runs
  // (unknown policy, unknown parameter, bad value, a backend the device cannot run: UsageError).
  // `backend`, when given, receives the scoring backend `--scoring` resolved to on `device`.
  std::unique_ptr<PolicyProgram> load(const jit::DeviceChoice& device, jit::ScoringBackend* backend = nullptr) const;
  // Parses --budget and checks it against the prompt (a token budget above the prompt is an error);
  // prompt_len < 0: parse only (to report a bad budget before loading the model).
  Budget parsed_budget(int prompt_len) const;
};

}  // namespace kvevict::cli
