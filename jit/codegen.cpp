// Policy -> CUDA: compile the policy file with the DSL (dsl/policy_file.h) and generate kernels
// from its lowered score programs, its channel_score program and its layer_weight program
// (cuda_codegen.h). Head plans and the extra select.stages programs stay on the CPU.
#include "jit/codegen.h"

#include "core/util/error.h"

#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <filesystem>

#include "core/util/input_file.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "jit/cuda_codegen.h"
#endif

namespace kvevict::jit {

#ifdef KVEVICT_HAVE_LOWERED_FORM

bool code_generator_available() { return true; }

GeneratedKernel generate_compiled_policy_cuda(const dsl::CompiledPolicy& compiled, const std::string& path,
                                              const std::string& text) {
  const std::string name = compiled.desc.name.empty() ? std::filesystem::path(path).stem().string() : compiled.desc.name;
  // GenerateError messages already cite the policy file, line and column; the #line directives
  // cite the policy's own lines, so NVRTC's messages name them too.
  return generate_score_kernels(name + ".cu", path, compiled.score, compiled.desc.has_decode_score ? &compiled.decode_score : nullptr,
                                find_policy_key_in_text(path, text, "score"),
                                find_policy_key_in_text(path, text, "decode_score"),
                                compiled.channel_score.output >= 0 ? &compiled.channel_score : nullptr,
                                find_policy_key_in_text(path, text, "channel_score"),
                                compiled.desc.has_layer_weight ? &compiled.layer_weight : nullptr,
                                find_policy_key_in_text(path, text, "layer_weight"));
}

GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>& overrides,
                                     const std::vector<std::string>& policy_dirs) {
  const std::string path = resolve_policy_path(name_or_path, policy_dirs);
  const std::string text = read_input_file(path, InputLimits::kPolicyFile, "policy file");
  return generate_compiled_policy_cuda(dsl::compile_policy_text(path, text, overrides), path, text);
}

#else

bool code_generator_available() { return false; }

GeneratedKernel generate_compiled_policy_cuda(const dsl::CompiledPolicy&, const std::string& path, const std::string&) {
  throw RuntimeError("cannot generate CUDA for policy '" + path +
                     "': this build has no DSL lowered form for the code generator");
}

GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>&,
                                     const std::vector<std::string>&) {
  throw RuntimeError("cannot generate CUDA for policy '" + name_or_path +
                     "': this build has no DSL lowered form for the code generator "
                     "(`kvevict compile FILE.cu` compiles CUDA source directly)");
}

#endif

}  // namespace kvevict::jit
