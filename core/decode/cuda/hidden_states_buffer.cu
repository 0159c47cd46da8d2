// The block's attention inputs, transposed for device scoring; contracts in hidden_states_buffer.h
// and core/decode/hidden_states_signal.h (whose element body hidden_states_twin runs on the CPU).
#include <cuda_runtime.h>

#include <string>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/hidden_states_buffer.h"
#include "core/decode/cuda/launch_status.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kTile = 32;     // a tile is kTile tokens x kTile channels
constexpr int kTileRows = 8;  // threads per tile: kTile x kTileRows, each copying kTile / kTileRows floats

// Block (x, y) copies channels x * kTile.. of tokens y * kTile..: reads rows[token][channel] along
// the channels, writes out[channel][token] along the tokens. The +1 column keeps the shared-memory
// reads of a column on distinct banks.
__global__ void hidden_states_transpose_kernel(const HiddenStatesArgs a) {
  __shared__ float tile[kTile][kTile + 1];
  const int c0 = int(blockIdx.x) * kTile, t0 = int(blockIdx.y) * kTile;
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int t = t0 + k, c = c0 + int(threadIdx.x);
    if (t < a.n_tokens && c < a.dim) tile[k][threadIdx.x] = a.rows[size_t(t) * a.dim + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRows) {
    const int c = c0 + k, t = t0 + int(threadIdx.x);
    if (t < a.n_tokens && c < a.dim) a.out[size_t(c) * a.n_tokens + t] = tile[threadIdx.x][k];
  }
}

}  // namespace

HiddenStatesBuffer::HiddenStatesBuffer() : out_(std::make_unique<DeviceArray<float>>()) {}

HiddenStatesBuffer::~HiddenStatesBuffer() = default;

HiddenStatesSignal HiddenStatesBuffer::fill(const float* rows, int n_tokens, int dim) {
  if (n_tokens <= 0 || dim <= 0) return {};
  HiddenStatesArgs a{rows, nullptr, n_tokens, dim};
  out_->grow(hidden_states_floats(a));
  a.out = out_->data();
  const dim3 grid(unsigned((dim + kTile - 1) / kTile), unsigned((n_tokens + kTile - 1) / kTile));
  if (grid.y > 65535u)  // the grid's y limit: 2^21 tokens in one block
    throw RuntimeError("CUDA hidden states: a block of " + std::to_string(n_tokens) + " tokens is over 2097120");
  hidden_states_transpose_kernel<<<grid, dim3(kTile, kTileRows)>>>(a);
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA hidden_states_transpose_kernel: ") + cudaGetErrorString(e));
  return describe_hidden_states(a, /*on_device=*/true);
}

}  // namespace kvevict::cuda
