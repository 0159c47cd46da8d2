// The scoring backend of a run; see scoring_backend.h.
#include "jit/scoring_backend.h"

#include "core/util/error.h"
#include "core/util/input_file.h"
#include "core/util/sha256.h"
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "jit/codegen.h"
#include "jit/jit_compiler.h"
#include "jit/jit_policy_program.h"
#include "jit/kernel_cache.h"

namespace kvevict::jit {

ScoringBackend resolve_scoring(std::string_view request, const DeviceChoice& device, const std::string& option) {
  ScoringBackend backend = ScoringBackend::Interpreter;
  if (request == "auto") {
    backend = device.kind == DeviceKind::Cuda ? ScoringBackend::CudaKernel : ScoringBackend::Interpreter;
  } else if (!parse_mode(request, backend)) {
    throw UsageError(option + " must be auto, interpreter, host or cuda, not '" + std::string(request) + "'");
  }
  if (backend == ScoringBackend::CudaKernel && device.kind != DeviceKind::Cuda)
    throw UsageError(option + " cuda scores on the GPU the decoder runs on, but the decoder runs on the cpu "
                     "(choose interpreter or host, or run the decoder on a CUDA device)");
  return backend;
}

std::unique_ptr<PolicyProgram> make_scoring_program(dsl::CompiledPolicy compiled, const std::string& path,
                                                    const std::string& text, ScoringBackend backend,
                                                    const DeviceChoice& device) {
  if (backend == ScoringBackend::Interpreter) return std::make_unique<dsl::InterpretedPolicy>(std::move(compiled));
  if (!code_generator_available())
    throw RuntimeError(path + ": this build has no code generator; use --scoring interpreter");
  const GeneratedKernel kernel = generate_compiled_policy_cuda(compiled, path, text);
  auto reference = std::make_unique<dsl::InterpretedPolicy>(std::move(compiled));
  if (backend == ScoringBackend::HostKernel)
    return JitPolicyProgram::on_host(std::move(reference), kernel, KernelCache::default_dir() + "/host");
  if (device.kind != DeviceKind::Cuda)
    throw UsageError(path + ": CUDA scoring needs a CUDA device (the decoder runs on the cpu)");
  NvrtcRequest request;
  request.name = kernel.name;
  request.source = kernel.source;
  request.arch = target_arch("", device);
  request.options = default_jit_options();
  const JitKernel compiled_kernel = compile_cached(request, process_kernel_cache(), kernel.name);
  return JitPolicyProgram::on_gpu(std::move(reference), kernel, *compiled_kernel.entry, device.ordinal);
}

std::unique_ptr<PolicyProgram> load_scored_policy(const std::string& name_or_path,
                                                  const std::map<std::string, std::string>& overrides,
                                                  const std::vector<std::string>& extra_dirs, ScoringBackend backend,
                                                  const DeviceChoice& device) {
  const std::string path = resolve_policy_path(name_or_path, extra_dirs);
  const std::string text = read_input_file(path, InputLimits::kPolicyFile, "policy file");
  return make_scoring_program(dsl::compile_policy_text(path, text, overrides), path, text, backend, device);
}

}  // namespace kvevict::jit
