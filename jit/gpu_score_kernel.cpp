// GPU scoring runner; see gpu_score_kernel.h.
#include "jit/gpu_score_kernel.h"

#include <string>

#include "core/util/error.h"
#include "dsl/matrix_ops.h"

namespace kvevict::jit {

GpuScoreKernel::GpuScoreKernel(const KernelCacheEntry& binary, const std::string& entry, int stages, MatrixScratch matrices,
                               KernelOutput output, const std::vector<LoadedTable>& tables)
    : module_(binary.payload.data(), binary.payload.size()), function_(module_.function(entry)), stages_(stages),
      matrices_(matrices), output_(output) {
  load_tables(module_, tables);
  if (stages_ < 0) throw RuntimeError("GpuScoreKernel: negative stage count");
  if (matrices_.count < 0 || matrices_.count > stages_ || matrices_.axes < 0 || matrices_.axes > 3)
    throw RuntimeError("GpuScoreKernel: invalid matrix stages");
  if (stages_ > 0) stage_function_ = module_.function(entry + "_stages");
}

void ensure_device_bytes(DeviceBuffer& buffer, size_t bytes) {
  // A quarter's room when it grows: a head scored at every decode step may hold one entry more
  // each time, and freeing device memory synchronises the device. The old buffer goes first (the
  // peak is the new one alone), and where the room is not free the exact size is asked for (as
  // DeviceArray::grow does).
  if (buffer.size() >= bytes && buffer.address() != 0) return;
  buffer = DeviceBuffer();
  try {
    buffer = DeviceBuffer(bytes + bytes / 4);
  } catch (const RuntimeError&) {
    buffer = DeviceBuffer(bytes);
  }
}

KvScoreArgs DeviceSignalCopies::upload(const ScoreInputs& in) {
  KvScoreArgs args = to_kernel_args(in);
  auto upload = [&](DeviceBuffer& buffer, const void* host, size_t bytes) -> uint64_t {
    if (!host) return 0;
    ensure_device_bytes(buffer, bytes);
    buffer.upload(host, bytes);
    return buffer.address();
  };
  for (int s = 0; s < kNumTensorSignals; ++s) {  // each signal's extent follows from its axes
    if ((in.device_signals >> s) & 1u) {  // already on the device (the caller's layout): read in place
      args.tensor[s] = in.tensor[s];
      continue;
    }
    const size_t n = size_t(signal_elements(static_cast<TensorSignal>(s), in.group, in.W, in.head_dim, in.T, in.n_embd));
    args.tensor[s] = reinterpret_cast<const float*>(upload(tensor_[s], in.tensor[s], n * sizeof(float)));
  }
  // The decoder's device cache's own positions, read in place; else the host's uploaded.
  args.position = in.device_position ? in.device_position
                                     : reinterpret_cast<const int*>(upload(position_, in.position,
                                                                           size_t(in.T > 0 ? in.T : 0) * sizeof(int32_t)));
  return args;
}

void GpuScoreKernel::score(const ScoreInputs& in, float* out) {
  const size_t outputs = prepare(in);
  ensure_device_bytes(out_, outputs * sizeof(float));
  launch_into(out_.address());
  synchronize_device();
  out_.download(out, outputs * sizeof(float));
}

void GpuScoreKernel::score_into(const ScoreInputs& in, uint64_t device_out) {
  prepare(in);
  launch_into(device_out);
}

size_t GpuScoreKernel::prepare(const ScoreInputs& in) {
  if (in.T < 0 || in.W < 0 || in.group < 1) throw RuntimeError("GpuScoreKernel: invalid input shape");
  args_ = signals_.upload(in);
  const size_t outputs = size_t(kernel_output_extent(args_, output_));
  args_.scratch = nullptr;
  if (matrices_.count > 0 && (in.head_dim < 1 || in.head_dim > dsl::kMaxMatrixDim))  // before allocating
    throw RuntimeError("inverse(): head_dim " + std::to_string(in.head_dim) +
                       " is outside the matrices the language inverts (1 .. " + std::to_string(dsl::kMaxMatrixDim) + ")");
  if (stages_ > 0) {  // the layout the kernel text computes (kernel_abi.h)
    const long long floats = kv_scratch_floats(args_, stages_, matrices_.count, matrices_.axes);
    ensure_device_bytes(scratch_, size_t(floats > 0 ? floats : 1) * sizeof(float));
    scratch_.zero();  // split stages' counters start at 0 (kernel_abi.h)
    args_.scratch = reinterpret_cast<float*>(scratch_.address());
  }
  return outputs;
}

void GpuScoreKernel::launch_again() { launch_into(out_.address()); }

void GpuScoreKernel::launch_into(uint64_t out_address) {
  void* params[] = {&args_, &out_address};
  // Nothing to write, nothing to run. A channel entry runs on T = 0 too: its outputs exist (its
  // reductions over t are empty), as the interpreter's do.
  const long long outputs = kernel_output_extent(args_, output_);
  if (outputs <= 0) return;
  // Stages in order on the default stream: each sees the slots of the ones before it.
  for (int stage = 0; stage < stages_; ++stage) {
    void* stage_params[] = {&args_, &stage};
    LaunchShape stage_shape;
    stage_shape.block_x = kStageThreads;
    stage_shape.grid_x = stage_grid_blocks(kv_stage_slots(args_));  // a block per slot, capped (kernel_abi.h)
    launch_kernel(stage_function_, stage_shape, stage_params);
  }
  LaunchShape shape;
  shape.block_x = kBlock;
  shape.grid_x = unsigned((size_t(outputs) + kBlock - 1) / kBlock);
  launch_kernel(function_, shape, params);
}

}  // namespace kvevict::jit
