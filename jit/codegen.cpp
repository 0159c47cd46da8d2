// Policy -> CUDA: compile the policy file with the DSL (dsl/policy_file.h) and generate kernels
// from its lowered score programs (cuda_codegen.h). Layer weights stay on the CPU.
#include "jit/codegen.h"

#include "core/util/error.h"

#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <filesystem>

#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "jit/cuda_codegen.h"
#endif

namespace kvevict::jit {

#ifdef KVEVICT_HAVE_LOWERED_FORM

bool code_generator_available() { return true; }

GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>& overrides,
                                     const std::vector<std::string>& policy_dirs) {
  const std::string path = resolve_policy_path(name_or_path, policy_dirs);
  const dsl::CompiledPolicy compiled = dsl::compile_policy_file(path, overrides);
  const std::string name = compiled.desc.name.empty() ? std::filesystem::path(path).stem().string() : compiled.desc.name;
  // GenerateError messages already cite the policy file, line and column.
  return generate_score_kernels(name + ".cu", path, compiled.score, compiled.desc.has_decode_score ? &compiled.decode_score : nullptr,
                                find_policy_key(path, "score"), find_policy_key(path, "decode_score"));
}

#else

bool code_generator_available() { return false; }

GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>&,
                                     const std::vector<std::string>&) {
  throw RuntimeError("cannot generate CUDA for policy '" + name_or_path +
                     "': this build has no DSL lowered form for the code generator "
                     "(`kvevict compile FILE.cu` compiles CUDA source directly)");
}

#endif

}  // namespace kvevict::jit
