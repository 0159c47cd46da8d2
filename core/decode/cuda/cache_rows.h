#pragma once
// CUDA launcher of the cached rows handed to device scoring (core/decode/cache_rows_signal.h): one
// layer's keys and/or values, read from the device-resident KV cache through DeviceKvLayerView and
// written as f32 [head_dim][length] per head into device memory, so the generated score kernels
// read K, V and K_pre (the keys rotated back by their positions) in place. No CUDA headers here: the launch goes to the legacy default stream
// (ordered with the decoder's kernels), and nothing is synchronised.
//
// The CUDA decoder's buffer for its observer (ObservationRequest::cache_keys_on_device,
// cache_values_on_device, row_norms_on_device): one device buffer per side asked for and one for
// the norms, grown with a quarter's room as needed (DeviceArray::grow; never shrunk, freed on
// destruction), reused layer after layer. fill launches the element bodies of cache_rows_signal.h (one thread per output float
// of K and V, one per entry for the norms; the projected value norms by a tiled kernel, below) and returns the signal describing the buffers (device
// memory). A failed launch or allocation throws RuntimeError naming it.
//
// The projected value norms (out_norm_l1, projected_value_norms.h) are dim x head_dim
// multiply-adds per output, so they get their own kernel: a block of 128 threads takes 128
// consecutive entries of one (stored head, query head of its group), stages W_o's rows for that
// query head in shared memory kProjectedValueChunk at a time, and each thread keeps one double per
// staged row. Every output's operations are the element body's, in its order (each row's dot over b
// in order, the rows' |.| summed in order), so the bits are the twin's.
#include <memory>

#include "core/decode/cache_rows_signal.h"

namespace kvevict::cuda {

template <typename T>
class DeviceArray;  // device_memory.h (CUDA headers)

class CacheRowsBuffer {
 public:
  CacheRowsBuffer();
  ~CacheRowsBuffer();
  CacheRowsBuffer(const CacheRowsBuffer&) = delete;
  CacheRowsBuffer& operator=(const CacheRowsBuffer&) = delete;
  // An empty signal when nothing is asked for. `rope`: a RoPE table in device memory covering the
  // view's positions, read only when the keys before RoPE are asked for; `projection`: the layer's
  // output projection in device memory, read only when the projected value norms are.
  CacheRowsSignal fill(const DeviceKvLayerView& view, CacheRowsWanted wanted, const RopeTableView& rope = {},
                       const OutputProjectionView& projection = {});

 private:
  std::unique_ptr<DeviceArray<float>> keys_, values_, keys_pre_rope_;
  std::unique_ptr<DeviceArray<float>> norms_;  // [key norms of every entry][value norms of every entry]
  std::unique_ptr<DeviceArray<float>> out_norms_l1_;  // [group x every entry]
};

}  // namespace kvevict::cuda
