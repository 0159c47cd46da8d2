// `kvevict compile POLICY [--arch sm_XX] [--emit cuda|ptx] [-o FILE] [--set name=value...]`:
// generates a policy's CUDA, compiles it with NVRTC (through the kernel cache) and prints the CUDA
// or the PTX. A FILE.cu argument is compiled as it is. No GPU is needed: without one the target is
// sm_80 unless --arch says otherwise.
#include <fstream>
#include <iostream>
#include <map>

#include "cli/command.h"
#include "core/util/error.h"
#include "core/util/input_file.h"
#include "jit/codegen.h"
#include "jit/cuda_driver.h"
#include "jit/jit_compiler.h"

namespace {

using namespace kvevict;

struct CompileArgs {
  std::string policy;
  std::string arch;
  std::string emit = "cuda";
  std::string output;
  std::vector<std::string> sets;
  std::vector<std::string> policy_dirs;
  bool no_cache = false;
};

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::map<std::string, std::string> parse_sets(const std::vector<std::string>& sets) {
  std::map<std::string, std::string> overrides;
  for (const auto& item : sets) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("--set '" + item + "': expected name=value");
    overrides[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return overrides;
}

jit::GeneratedKernel load_source(const CompileArgs& args) {
  if (ends_with(args.policy, ".cu") || ends_with(args.policy, ".cuh")) {
    if (!args.sets.empty()) throw UsageError("--set applies to policies, not to CUDA files");
    jit::GeneratedKernel kernel;
    kernel.name = args.policy;
    kernel.policy_file = args.policy;
    kernel.source = read_input_file(args.policy, InputLimits::kPolicyFile, "CUDA file");
    return kernel;
  }
  return jit::generate_policy_cuda(args.policy, parse_sets(args.sets), args.policy_dirs);
}

int run_compile(const CompileArgs& args) {
  if (args.emit != "cuda" && args.emit != "ptx") throw UsageError("--emit must be cuda or ptx, not '" + args.emit + "'");
  std::string arch = args.arch;
  if (arch.empty()) {
    const jit::CudaProbe probe = jit::CudaDriver::probe();
    arch = probe.usable ? probe.devices[0].arch() : "sm_80";
  }
  const int number = jit::parse_arch_number(arch);
  const jit::GeneratedKernel kernel = load_source(args);

  jit::NvrtcRequest request;
  request.name = kernel.name;
  request.source = kernel.source;
  // PTX comes from the virtual architecture of the same number; cubin from the real one.
  request.arch = args.emit == "ptx" ? "compute_" + std::to_string(number) : arch;
  request.options = jit::default_jit_options();

  jit::KernelCache::Options cache_options;
  cache_options.use_disk = !args.no_cache;
  jit::KernelCache cache(cache_options);
  const jit::JitKernel compiled = jit::compile_cached(request, cache, kernel.name);
  if (!compiled.log.empty()) std::cerr << compiled.log << "\n";

  std::string text;
  if (args.emit == "cuda") {
    text = kernel.source;
  } else {
    const auto& payload = compiled.entry->payload;
    text.assign(payload.begin(), payload.end());
    while (!text.empty() && text.back() == '\0') text.pop_back();
  }
  if (args.output.empty() || args.output == "-") {
    std::cout << text;
    if (!text.empty() && text.back() != '\n') std::cout << "\n";
  } else {
    std::ofstream out(args.output, std::ios::binary);
    out << text;
    if (!out) throw RuntimeError(args.output + ": cannot write");
  }
  const auto& nvrtc = jit::NvrtcLibrary::instance();
  std::cerr << "kvevict: compiled " << kernel.name << " for " << request.arch << " with NVRTC " << nvrtc.version_string()
            << " (" << jit::binary_kind_name(compiled.entry->kind) << ", " << compiled.entry->payload.size() << " bytes, "
            << (compiled.from_cache ? "from the kernel cache" : "compiled now") << ")\n";
  return 0;
}

std::function<int()> setup_compile(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  app.add_option("POLICY", args->policy, "Policy name or file (or a .cu file to compile as it is)")->required();
  app.add_option("--arch", args->arch, "Target architecture, e.g. sm_80, sm_90 (default: the GPU's, else sm_80)");
  app.add_option("--emit", args->emit, "What to print: cuda (the generated source) or ptx")->check(CLI::IsMember({"cuda", "ptx"}));
  app.add_option("-o,--output", args->output, "Write to FILE instead of standard output");
  app.add_option("--set", args->sets, "Override a policy parameter: name=value (repeatable)");
  app.add_option("--policy-path", args->policy_dirs, "Extra directory searched for policy names (repeatable)");
  app.add_flag("--no-cache", args->no_cache, "Do not read or write the on-disk kernel cache");
  return [args] { return run_compile(*args); };
}

KVEVICT_COMMAND("compile", "Generate a policy's CUDA and compile it with NVRTC (no GPU needed)", setup_compile, 60);

}  // namespace
