// Device resolution; see device.h.
#include "jit/device.h"

#include <atomic>
#include <iostream>

#include "core/decode/make_decoder.h"
#include "core/util/error.h"

namespace kvevict::jit {

namespace {
std::atomic<bool> fallback_noted{false};
}

std::string DeviceChoice::describe() const {
  if (kind == DeviceKind::Cpu) return "cpu";
  return "cuda:" + std::to_string(ordinal) + " (" + info.name + ", " + info.arch() + ")";
}

DeviceChoice resolve_device(const std::string& request, std::ostream* notes) {
  DeviceChoice choice;
  if (request == "cpu") return choice;

  int ordinal = 0;
  const bool wants_cuda = request == "cuda" || request.rfind("cuda:", 0) == 0;
  if (request.rfind("cuda:", 0) == 0) {
    const std::string digits = request.substr(5);
    bool valid = !digits.empty() && digits.size() <= 3;
    for (char c : digits) valid = valid && c >= '0' && c <= '9';
    if (!valid) throw UsageError("invalid --device '" + request + "' (expected auto, cpu, cuda or cuda:N)");
    ordinal = std::stoi(digits);
  } else if (request != "auto" && request != "cuda") {
    throw UsageError("invalid --device '" + request + "' (expected auto, cpu, cuda or cuda:N)");
  }

  const CudaProbe probe = CudaDriver::probe();
  if (probe.usable && ordinal < int(probe.devices.size())) {
    choice.kind = DeviceKind::Cuda;
    choice.ordinal = ordinal;
    choice.info = probe.devices[ordinal];
    return choice;
  }
  const std::string reason = probe.usable ? "CUDA device " + std::to_string(ordinal) + " does not exist (" +
                                                std::to_string(probe.devices.size()) + " found)"
                                          : probe.reason;
  if (wants_cuda) throw RuntimeError("--device " + request + " requested, but no usable CUDA device: " + reason);
  choice.note = reason;
  if (!fallback_noted.exchange(true))
    (notes ? *notes : std::cerr) << "kvevict: no usable CUDA device (" << reason << "); running on the CPU\n";
  return choice;
}

std::string target_arch(const std::string& explicit_arch, const DeviceChoice& device, const std::string& fallback) {
  if (!explicit_arch.empty()) return explicit_arch;
  if (device.kind == DeviceKind::Cuda) return device.info.arch();
  return fallback;
}

void reset_device_notice_for_tests() { fallback_noted = false; }

std::string cuda_unavailable_reason() {
  if (!cuda_decoder_built()) return "this kvevict was built without the CUDA toolkit";
  const CudaProbe probe = CudaDriver::probe();
  return probe.usable ? "" : "no usable CUDA device: " + probe.reason;
}

}  // namespace kvevict::jit
