// Policy -> CUDA. The DSL's lowered form has not landed yet, so this reports that plainly instead
// of pretending; see codegen.h for the shape the generator takes.
#include "jit/codegen.h"

#include "core/util/error.h"

namespace kvevict::jit {

bool code_generator_available() { return false; }

GeneratedKernel generate_policy_cuda(const std::string& name_or_path, const std::map<std::string, std::string>&,
                                     const std::vector<std::string>&) {
  throw RuntimeError("cannot generate CUDA for policy '" + name_or_path +
                     "': the code generator needs the DSL's lowered form, which this build does not have yet "
                     "(`kvevict compile FILE.cu` compiles CUDA source directly)");
}

}  // namespace kvevict::jit
