#pragma once
// The accumulated attention store on the current CUDA device (accumulated_attention_store.h; built
// only with KVEVICT_HAVE_CUDA): one buffer per layer and one scratch, grown (never shrunk) as the
// layers grow; a rebuild uploads its per-head parts and maps (one copy), and the host's column
// sums when a decoder made them there, then runs accumulated_rebuild_element one thread per output
// float on the legacy default stream and swaps the scratch in. Errors: a failing CUDA call or
// launch throws RuntimeError naming it.
//
// Status: compiled with nvcc, never run on a GPU during development; the GPU test
// (AccumulatedAttentionGpu, tests/core/accumulated_attention_gpu_test.cpp) compares it with the twin.
#include <memory>

#include "core/engine/accumulated_attention_store.h"

namespace kvevict::cuda {

std::unique_ptr<AccumulatedAttentionStore> make_cuda_accumulated_attention();

}  // namespace kvevict::cuda
