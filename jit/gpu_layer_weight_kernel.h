#pragma once
// Runs a compiled layer_weight kernel (KVEVICT_LAYER_ENTRY, kernel_abi.h "Layer entries") on the
// GPU for one layer: every KV head's signals are uploaded (or read in place when marked as device
// memory), the heads' argument sets go to the device, the stages run over the (g, h, q, c) slots,
// then one thread writes the layer's value, which comes back as one float.
#include <string>
#include <vector>

#include "core/engine/policy_program.h"
#include "jit/cuda_driver.h"
#include "jit/gpu_score_kernel.h"
#include "jit/kernel_abi.h"
#include "jit/kernel_cache.h"
#include "jit/loaded_tables.h"

namespace kvevict::jit {

class GpuLayerWeightKernel {
 public:
  // `binary` contains `entry` (and `entry`_stages when `stages` > 0); `tables`: its tables too large
  // to bake (GeneratedKernel::loaded_tables), filled into the module here. The device must be current.
  GpuLayerWeightKernel(const KernelCacheEntry& binary, const std::string& entry, int stages,
                       const std::vector<LoadedTable>& tables = {});

  // The program's value for the layer (NaN kept: the caller decides what it means). The heads
  // must share T, W and group (the caller checks, as the interpreter does).
  float run(const LayerWeightInputs& in);

 private:
  CudaModule module_;
  void* function_ = nullptr;
  void* stage_function_ = nullptr;
  int stages_ = 0;
  std::vector<DeviceSignalCopies> heads_;  // one per KV head, grown as needed
  DeviceBuffer head_args_, out_, scratch_;
};

}  // namespace kvevict::jit
