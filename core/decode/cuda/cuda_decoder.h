#pragma once
// The CUDA decoder backend (built only with KVEVICT_HAVE_CUDA; reach it through make_decoder.h).
// Same contract as the CPU decoder (decoder.h): the host KVCache stays the one source of truth, so
// the eviction engine and observers work unchanged. Design and costs are in docs/CUDA.md:
//   - weights converted to fp16 at construction; GEMMs are cuBLAS fp16 x fp16 -> fp32 with fp32
//     accumulation; activations, norms, RoPE, softmax and the residual stream stay fp32;
//   - each layer's freshly computed K/V are copied back and appended to the host cache, and the
//     layer's whole (possibly compacted) host cache is copied to the device before attention:
//     O(cache bytes of the layer) host->device traffic per layer per forward call.
// Not validated on a GPU during development (none was available); tests/core/cuda_decoder_test.cpp
// compares it with the CPU decoder when a GPU is present.
#include <memory>

#include "core/decode/decoder.h"

namespace kvevict {

// Throws RuntimeError when the CUDA runtime or cuBLAS cannot start on device options.device_ordinal.
std::unique_ptr<Decoder> make_cuda_decoder(const Model& model, const DecoderOptions& options = {});

}  // namespace kvevict
