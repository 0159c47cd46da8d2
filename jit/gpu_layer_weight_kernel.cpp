// GPU layer_weight runner; see gpu_layer_weight_kernel.h.
#include "jit/gpu_layer_weight_kernel.h"

#include "core/util/error.h"

namespace kvevict::jit {

GpuLayerWeightKernel::GpuLayerWeightKernel(const KernelCacheEntry& binary, const std::string& entry, int stages,
                                           const std::vector<LoadedTable>& tables)
    : module_(binary.payload.data(), binary.payload.size()), function_(module_.function(entry)), stages_(stages) {
  load_tables(module_, tables);
  if (stages_ < 0) throw RuntimeError("GpuLayerWeightKernel: negative stage count");
  if (stages_ > 0) stage_function_ = module_.function(entry + "_stages");
}

float GpuLayerWeightKernel::run(const LayerWeightInputs& in) {
  if (in.heads.empty()) throw RuntimeError("GpuLayerWeightKernel: no KV heads");
  std::vector<KvScoreArgs> args = layer_kernel_args(in);
  if (heads_.size() < args.size()) heads_.resize(args.size());
  for (size_t g = 0; g < args.size(); ++g) {  // device addresses of head g's signals
    const KvScoreArgs on_device = heads_[g].upload(in.heads[g]);
    for (int s = 0; s < kNumTensorSignals; ++s) args[g].tensor[s] = on_device.tensor[s];
    args[g].position = on_device.position;
  }
  const size_t args_bytes = args.size() * sizeof(KvScoreArgs);
  ensure_device_bytes(head_args_, args_bytes);
  ensure_device_bytes(out_, sizeof(float));
  const auto* device_heads = reinterpret_cast<const KvScoreArgs*>(head_args_.address());
  for (KvScoreArgs& a : args) a.layer_heads = device_heads;
  if (stages_ > 0) {  // the layout the kernel text computes (kernel_abi.h), now with the g slots
    const long long floats = kv_scratch_floats(args[0], stages_, 0, 0);
    ensure_device_bytes(scratch_, size_t(floats > 0 ? floats : 1) * sizeof(float));
    scratch_.zero();  // split stages' counters start at 0 (kernel_abi.h)
    for (KvScoreArgs& a : args) a.scratch = reinterpret_cast<float*>(scratch_.address());
  }
  head_args_.upload(args.data(), args_bytes);
  KvScoreArgs first = args[0];
  uint64_t out_address = out_.address();
  for (int stage = 0; stage < stages_; ++stage) {  // in order on the default stream
    void* stage_params[] = {&first, &stage};
    LaunchShape shape;
    shape.block_x = kStageThreads;
    shape.grid_x = stage_grid_blocks(kv_stage_slots(first));  // a block per (g, h, q, c) slot, capped
    if (shape.grid_x > 0) launch_kernel(stage_function_, shape, stage_params);
  }
  void* params[] = {&first, &out_address};
  launch_kernel(function_, LaunchShape{}, params);
  synchronize_device();
  float value = 0;
  out_.download(&value, sizeof(float));
  return value;
}

}  // namespace kvevict::jit
