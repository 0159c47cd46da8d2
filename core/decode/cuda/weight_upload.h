#pragma once
// The CUDA decoder's weights on their way to the device (docs/CUDA.md, "Design"): a matrix in
// whatever storage it has (f32 or its file format, weights.h) uploaded as T (fp16 or f32),
// dequantised and converted on the host a batch of rows at a time: never an f32 copy of a whole
// tensor. A batch is cut into pieces of at most 256 rows and 2^20 elements, the pieces are
// dequantised and converted on all cores (std::thread: nvcc compiles this without OpenMP's flags),
// then the batch is uploaded. Every element is converted alone (round to nearest even) and rows
// dequantise independently, so the bits uploaded do not depend on the number of threads or on the
// cuts (8e9 weights in an 8B model: on one core, each decoder took about a minute to make on the
// first H200 run). The arrays are owned by `owner`; the pointer returned stays valid with it.
#include <cuda_fp16.h>

#include <memory>
#include <vector>

#include "core/decode/cuda/device_memory.h"
#include "core/model/weights.h"

namespace kvevict::cuda {

// T is __half or float.
template <typename T>
DeviceArray<T>* upload_matrix(const TypedMatrix& m, std::vector<std::unique_ptr<DeviceArray<T>>>& owner);

DeviceArray<float>* upload_float(const std::vector<float>& host, std::vector<std::unique_ptr<DeviceArray<float>>>& owner);

}  // namespace kvevict::cuda
