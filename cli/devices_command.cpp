// `kvevict devices [--device auto|cpu|cuda]`: what this machine offers for running policies: the
// NVRTC compiler, the CUDA driver and its devices, and what --device resolves to (the same
// resolution every command with --device uses; --device cuda without a GPU exits 1).
#include <iostream>

#include "cli/command.h"
#include "jit/cuda_driver.h"
#include "jit/device.h"
#include "jit/nvrtc_library.h"

namespace {

using namespace kvevict;

int run_devices(const std::string& device) {
  const jit::DeviceChoice choice = jit::resolve_device(device, &std::cerr);
  std::string why;
  if (jit::NvrtcLibrary::available(&why)) {
    const auto& nvrtc = jit::NvrtcLibrary::instance();
    std::cout << "NVRTC: " << nvrtc.version_string() << " (" << nvrtc.path() << ")";
    if (!nvrtc.supported_archs().empty()) {
      std::cout << "; targets";
      for (int a : nvrtc.supported_archs()) std::cout << " sm_" << a;
    }
    std::cout << "\n";
  } else {
    std::cout << "NVRTC: not available (" << why << ")\n";
  }
  const jit::CudaProbe probe = jit::CudaDriver::probe();
  if (probe.driver_version > 0)
    std::cout << "CUDA driver: " << probe.driver_version / 1000 << "." << (probe.driver_version % 1000) / 10 << "\n";
  else
    std::cout << "CUDA driver: not available (" << probe.reason << ")\n";
  for (const auto& d : probe.devices)
    std::cout << "  cuda:" << d.ordinal << "  " << d.name << "  " << d.arch() << "  " << (d.total_memory >> 20) << " MiB\n";
  std::cout << "--device " << device << " -> " << choice.describe() << "\n";
  return 0;
}

std::function<int()> setup_devices(CLI::App& app) {
  auto device = std::make_shared<std::string>("auto");
  app.add_option("--device", *device, "Device to resolve: auto, cpu, cuda or cuda:N")->capture_default_str();
  return [device] { return run_devices(*device); };
}

KVEVICT_COMMAND("devices", "Show NVRTC, the CUDA driver and GPUs, and what --device resolves to", setup_devices, 62);

}  // namespace
