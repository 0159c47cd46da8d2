#include "evals/policy_source.h"

#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/input_file.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"

namespace kvevict::evals {
namespace {

// Every parameter's value after defaults and overrides, typed: numbers keep full precision (a
// value_text() rounds to 6 digits, which could make two different values one hash).
std::string resolved_params_json(const dsl::CompiledPolicy& compiled) {
  nlohmann::json params = nlohmann::json::object();
  for (size_t i = 0; i < compiled.params.size() && i < compiled.bindings.size(); ++i) {
    const dsl::ParamDecl& declared = compiled.params[i];
    const double value = compiled.bindings[i].value;
    if (declared.type == "bool") params[declared.name] = value != 0;
    else if (declared.type == "enum") params[declared.name] = declared.value_text(value);
    else if (declared.type == "int") params[declared.name] = static_cast<long long>(value);
    else params[declared.name] = value;
  }
  return params.dump();
}

}  // namespace

LoadedPolicy load_policy_choice(const PolicyChoice& choice, jit::ScoringBackend backend, const jit::DeviceChoice& device) {
  std::string path, text;
  if (choice.source) {
    path = choice.policy + " (stored source)";
    text = *choice.source;
  } else {
    path = resolve_policy_path(choice.policy);
    text = read_input_file(path, InputLimits::kPolicyFile, "policy file");
  }
  dsl::CompiledPolicy compiled = dsl::compile_policy_text(path, text, choice.params);
  LoadedPolicy loaded;
  loaded.source = make_policy_source(choice, text, resolved_params_json(compiled));
  loaded.program = jit::make_scoring_program(std::move(compiled), path, text, backend, device);
  return loaded;
}

std::string policy_text_if_any(const PolicyChoice& choice) {
  if (choice.source) return *choice.source;
  std::string path;
  try {
    path = resolve_policy_path(choice.policy);
  } catch (const UsageError&) {
    return "";
  }
  return read_input_file(path, InputLimits::kPolicyFile, "policy file");
}

}  // namespace kvevict::evals
