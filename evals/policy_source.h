#pragma once
// Loading an eval's policy so that what runs is what the results store records: the file is read
// once, that exact text is compiled with the config's parameters, and the text, its resolved
// parameters and their hash (evals/stored_content.h) are kept with the compiled program.
#include <memory>

#include "core/engine/policy_program.h"
#include "evals/config.h"
#include "evals/stored_content.h"
#include "jit/scoring_backend.h"

namespace kvevict::evals {

struct LoadedPolicy {
  PolicySource source;
  std::unique_ptr<PolicyProgram> program;
};

// Compiles `choice.source` when set (a replay), else the file `choice.policy` names (a built-in
// name, a name in the search path or a path; dsl/policy_loader.h). Throws UsageError like
// load_policy: unknown names, unreadable files, every error of the file at file:line:col. The
// program scores on `backend` (jit/scoring_backend.h; `device` for CudaKernel).
LoadedPolicy load_policy_choice(const PolicyChoice& choice,
                                jit::ScoringBackend backend = jit::ScoringBackend::Interpreter,
                                const jit::DeviceChoice& device = {});

// The text of the file `choice.policy` names (or `choice.source`), without compiling it: the fake
// model's record of a policy. "" when the name names no file (the fake accepts any name).
std::string policy_text_if_any(const PolicyChoice& choice);

}  // namespace kvevict::evals
