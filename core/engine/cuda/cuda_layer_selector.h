#pragma once
// The engine's cuda layer selector (layer_selector.h; built only with KVEVICT_HAVE_CUDA): packs a
// layer's host scores and positions, uploads them, runs cuda::DeviceSelector on the current
// device, and downloads the kept lists (one synchronisation per layer). Device buffers grow to the
// largest layer seen and are reused. The per-layer score buffers (layer_score_buffer) hold a
// prompt's scores until the layer's last selection of the prompt, which frees them; a decode
// eviction's (budget-sized) until the next prompt. Errors: bad input throws UsageError before any launch (the
// twin's checks); a failing CUDA call or launch throws RuntimeError naming it.
//
// Status: compiled with nvcc, never run on a GPU during development; the GPU test
// (LayerSelectorEngineGpu, tests/core/layer_selector_test.cpp) compares the engine's caches with
// the host selection's.
#include <memory>

#include "core/engine/layer_selector.h"

namespace kvevict::cuda {

std::unique_ptr<LayerSelector> make_cuda_layer_selector();

}  // namespace kvevict::cuda
