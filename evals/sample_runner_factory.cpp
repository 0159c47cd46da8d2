// Chooses the runner for a config's model, and checks policy entries before any model is loaded.
#include <filesystem>

#include "core/util/error.h"
#include "evals/fake_runner.h"
#include "dsl/policy_loader.h"
#include "evals/sample_runner.h"

namespace kvevict::evals {
namespace {

bool looks_like_path(const std::string& text) {
  return text.find('/') != std::string::npos || text.ends_with(".yaml") || text.ends_with(".yml") ||
         text.ends_with(".kvp");
}

}  // namespace

std::unique_ptr<SampleRunner> make_model_runner(const EvalConfig& config);  // evals/model_runner.cpp

std::unique_ptr<SampleRunner> make_sample_runner(const EvalConfig& config) {
  if (config.model.rfind("fake:", 0) == 0) return std::make_unique<FakeRunner>(config.model, config.prefill);
  return make_model_runner(config);
}

void check_policy_choice(const std::string& model, const PolicyChoice& choice) {
  if (model.rfind("fake:", 0) != 0) {
    load_policy(choice.policy, choice.params);  // UsageError with the policy file's own file:line:col
    return;
  }
  // The fake model ignores policies; names only have to look like names.
  if (looks_like_path(choice.policy)) {
    std::error_code unreadable;
    if (!std::filesystem::is_regular_file(choice.policy, unreadable)) {
      throw UsageError("policy file '" + choice.policy + "' does not exist");
    }
    return;
  }
  for (char c : choice.policy) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      throw UsageError("'" + choice.policy + "' is neither a policy name nor a path to a policy file");
    }
  }
}

}  // namespace kvevict::evals
