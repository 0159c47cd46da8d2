#pragma once
// Runs a compiled scoring kernel (KVEVICT_SCORE_ENTRY convention, kernel_abi.h) on the GPU for one
// (layer, KV head): uploads the inputs ScoreInputs points at (a signal marked as device memory is
// read in place), launches one thread per output element (a token, or a key channel for a
// KVEVICT_CHANNEL_ENTRY: KernelOutput) and downloads them, or leaves them in device memory the
// caller names (score_into: the engine's decode scores, written into the device selector's
// buffer). Buffers are kept and grown across calls.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/policy_program.h"
#include "jit/cuda_driver.h"
#include "jit/kernel_abi.h"
#include "jit/kernel_cache.h"
#include "jit/loaded_tables.h"

namespace kvevict::jit {

// The device copies of one head's signals (ScoreInputs), grown and reused across calls.
class DeviceSignalCopies {
 public:
  // `in`'s arguments (to_kernel_args) with every signal's address on the device: a signal marked in
  // in.device_signals is read in place (the caller's layout, the extent its axes give), and the
  // positions at in.device_position when set; the others are uploaded here. The scratch is null.
  KvScoreArgs upload(const ScoreInputs& in);

 private:
  std::array<DeviceBuffer, kNumTensorSignals> tensor_;  // by TensorSignal
  DeviceBuffer position_;
};

// Grows `buffer` (contents lost) to hold at least `bytes`, with a quarter more room when it grows.
void ensure_device_bytes(DeviceBuffer& buffer, size_t bytes);

class GpuScoreKernel {
 public:
  // `binary` is a cubin or NUL-terminated PTX containing `entry` (and `entry`_stages when
  // `stages` > 0: a staged kernel, kernel_abi.h; `matrices` of them are matrix stages, whose
  // scratch follows kernel_abi.h's layout). `output`: the entry's output axis, Token (out[t], t < T)
  // or Channel (out[c], c < head_dim). `tables`: the kernel's tables too large to bake
  // (GeneratedKernel::loaded_tables), filled into the module here. The device must be current
  // (use_cuda_device).
  GpuScoreKernel(const KernelCacheEntry& binary, const std::string& entry, int stages = 0, MatrixScratch matrices = {},
                 KernelOutput output = KernelOutput::Token, const std::vector<LoadedTable>& tables = {});

  // Copies the inputs to the device (a signal marked in in.device_signals is read in place, with
  // the extent its axes give), scores, copies out[0..T) (a channel entry: out[0..head_dim)) back.
  void score(const ScoreInputs& in, float* out);

  // score() into device memory: out[0..T) at `device_out` (an address on the current device), with
  // no synchronisation and no download (the launch is ordered before later default-stream work).
  void score_into(const ScoreInputs& in, uint64_t device_out);

  // Launch only (stages, then the tokens), on inputs already uploaded by the last score() call.
  void launch_again();

  static constexpr unsigned kBlock = 256;

 private:
  size_t prepare(const ScoreInputs& in);  // uploads, sizes the scratch; returns the outputs
  void launch_into(uint64_t out_address);
  CudaModule module_;
  void* function_ = nullptr;
  void* stage_function_ = nullptr;
  int stages_ = 0;
  MatrixScratch matrices_;
  KernelOutput output_;
  DeviceSignalCopies signals_;
  DeviceBuffer out_, scratch_;
  KvScoreArgs args_{};
};

}  // namespace kvevict::jit
