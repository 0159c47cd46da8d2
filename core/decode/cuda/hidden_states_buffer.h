#pragma once
// CUDA launcher of the block's attention inputs handed to device scoring
// (core/decode/hidden_states_signal.h): the decoder's f32 rows [n_tokens][dim] (its RMSNorm output,
// on the device) transposed into hidden[c, t] ([dim][n_tokens]), so the generated score kernels read
// KVzap's `hidden` in place. No CUDA headers here: the launch goes to the legacy default stream
// (ordered with the decoder's kernels), and nothing is synchronised.
//
// The CUDA decoder's buffer for its observer (ObservationRequest::hidden_states_on_device): one
// device buffer, grown with a quarter's room as needed (DeviceArray::grow; never shrunk, freed on
// destruction), reused layer after layer. The kernel copies 32 x 32 tiles through shared memory
// (reads along a row, writes along a column: both coalesced); a copy does no arithmetic, so its
// bits are the element body's (hidden_states_twin). A failed launch or allocation throws
// RuntimeError naming it.
#include <memory>

#include "core/decode/hidden_states_signal.h"

namespace kvevict::cuda {

template <typename T>
class DeviceArray;  // device_memory.h (CUDA headers)

class HiddenStatesBuffer {
 public:
  HiddenStatesBuffer();
  ~HiddenStatesBuffer();
  HiddenStatesBuffer(const HiddenStatesBuffer&) = delete;
  HiddenStatesBuffer& operator=(const HiddenStatesBuffer&) = delete;
  // `rows`: device memory, [n_tokens][dim]. An empty signal for an empty block.
  HiddenStatesSignal fill(const float* rows, int n_tokens, int dim);

 private:
  std::unique_ptr<DeviceArray<float>> out_;
};

}  // namespace kvevict::cuda
