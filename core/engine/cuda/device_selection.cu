// Kernels of device-side selection: thin wrappers that run device_selection_head.h's block
// stages with a barrier-per-phase executor (contract: device_selection.h).
#include "core/decode/cuda/launch_status.h"
#include "core/engine/cuda/device_selection.h"

#include <cuda_runtime.h>

#include <string>

#include "core/engine/device_selection_twin.h"
#include "core/util/error.h"

namespace kvevict::cuda {
namespace {

using devsel::HeadParams;
using devsel::HeadState;
using devsel::SelLayerInput;
using devsel::SelOutput;
using devsel::SelWorkspace;

void check_call(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("device selection: ") + what + ": " + cudaGetErrorString(e));
}
void check_launch(const char* kernel) { check_call(launch_status(), kernel); }

// Every thread runs the driver; the leading barrier keeps a phase from overwriting shared state
// that a slower thread is still reading in the driver (device_selection_elements.h).
struct GpuExec {
  int tid;
  template <class F>
  __device__ void phase(F&& f) {
    __syncthreads();
    f(tid);
    __syncthreads();
  }
};

__global__ void select_heads_kernel(SelLayerInput in, SelWorkspace ws, SelOutput out, const HeadParams* params) {
  __shared__ devsel::SelShared sh;
  GpuExec ex{static_cast<int>(threadIdx.x)};
  const HeadParams hp = params[blockIdx.x];
  devsel::select_head_block(ex, sh, devsel::head_io(in, ws, out, static_cast<int>(blockIdx.x)), hp);
}

__global__ void protect_kernel(SelLayerInput in, SelWorkspace ws, SelOutput out, const HeadParams* params) {
  __shared__ devsel::SelShared sh;
  GpuExec ex{static_cast<int>(threadIdx.x)};
  const HeadParams hp = params[blockIdx.x];
  devsel::stage_protect(ex, sh, devsel::head_io(in, ws, out, static_cast<int>(blockIdx.x)), hp);
}

__global__ void joint_kernel(SelLayerInput in, SelWorkspace ws, SelOutput out) {
  __shared__ devsel::SelShared sh;
  GpuExec ex{static_cast<int>(threadIdx.x)};
  devsel::stage_joint(ex, sh, in, ws, out);
}

}  // namespace

struct DeviceSelector::Impl {
  unsigned char* workspace = nullptr;
  int64_t workspace_bytes = 0;
  HeadParams* params = nullptr;  // kSelMaxHeads entries

  Impl() { check_call(cudaMalloc(&params, sizeof(HeadParams) * devsel::kSelMaxHeads), "cudaMalloc"); }
  ~Impl() {
    cudaFree(workspace);
    cudaFree(params);
  }
  SelWorkspace reserve(const SelLayerInput& in) {
    const int64_t bytes = selection_workspace_bytes(in);
    if (bytes > workspace_bytes) {
      cudaFree(workspace);
      workspace = nullptr;
      workspace_bytes = 0;
      check_call(cudaMalloc(&workspace, static_cast<size_t>(bytes)), "cudaMalloc");
      workspace_bytes = bytes;
    }
    return SelWorkspace{workspace, devsel::sel_head_bytes(in.max_length)};
  }
  void upload(const std::vector<HeadParams>& p) {
    check_call(cudaMemcpy(params, p.data(), sizeof(HeadParams) * p.size(), cudaMemcpyHostToDevice), "upload params");
  }
};

DeviceSelector::DeviceSelector() : impl_(std::make_unique<Impl>()) {}
DeviceSelector::~DeviceSelector() = default;

namespace {
void check_output(const SelLayerInput& in, const SelOutput& out) {
  if (in.n_heads > 0 && (out.kept == nullptr || out.kept_count == nullptr || out.kept_stride < in.max_length))
    throw UsageError("device selection: output needs kept_stride >= max_length and non-null buffers");
}
}  // namespace

void DeviceSelector::select_heads(const SelLayerInput& in, const std::vector<HeadParams>& params,
                                  const SelOutput& out) {
  check_selection_input(in);
  check_output(in, out);
  if (params.size() != static_cast<size_t>(in.n_heads)) throw UsageError("device selection: one HeadParams per head expected");
  if (in.n_heads == 0) return;
  const SelWorkspace ws = impl_->reserve(in);
  impl_->upload(params);
  select_heads_kernel<<<in.n_heads, devsel::kSelThreads>>>(in, ws, out, impl_->params);
  check_launch("select_heads_kernel");
}

void DeviceSelector::select_layer_adaptive(const SelLayerInput& in, const std::vector<int>& budget, int protect_first,
                                           int protect_recent, double floor_alpha, bool score_order,
                                           const SelOutput& out) {
  check_selection_input(in);
  check_output(in, out);
  if (budget.size() != static_cast<size_t>(in.n_heads)) throw UsageError("device selection: one budget per head expected");
  std::vector<HeadParams> params = adaptive_head_params(budget, protect_first, protect_recent, floor_alpha, score_order);
  if (in.n_heads == 0) return;
  const SelWorkspace ws = impl_->reserve(in);
  impl_->upload(params);
  protect_kernel<<<in.n_heads, devsel::kSelThreads>>>(in, ws, out, impl_->params);
  check_launch("protect_kernel");
  joint_kernel<<<1, devsel::kSelThreads>>>(in, ws, out);
  check_launch("joint_kernel");
  // Every head's state in one strided copy (one synchronisation): they lie ws.head_bytes apart.
  std::vector<HeadState> states(static_cast<size_t>(in.n_heads));
  const HeadState* first = devsel::head_io(in, ws, out, 0).state;  // pointer arithmetic only
  check_call(cudaMemcpy2D(states.data(), sizeof(HeadState), first, static_cast<size_t>(ws.head_bytes),
                          sizeof(HeadState), static_cast<size_t>(in.n_heads), cudaMemcpyDeviceToHost),
             "download head states");
  const std::vector<int64_t> share = adaptive_shares(states, floor_alpha);
  for (int h = 0; h < in.n_heads; ++h) params[static_cast<size_t>(h)].ada_top = share[static_cast<size_t>(h)];
  impl_->upload(params);
  select_heads_kernel<<<in.n_heads, devsel::kSelThreads>>>(in, ws, out, impl_->params);
  check_launch("select_heads_kernel (Ada-KV)");
}

}  // namespace kvevict::cuda
