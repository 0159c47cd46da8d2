#pragma once
// The CUDA decoder backend (built only with KVEVICT_HAVE_CUDA; reach it through make_decoder.h).
// Same contract as the CPU decoder (decoder.h): the host KVCache (Decoder::cache()) stays the
// cache the eviction engine and observers read and mutate, so they work unchanged. Design and
// costs are in docs/CUDA.md:
//   - weights converted to fp16 at construction; GEMMs are cuBLAS fp16 x fp16 -> fp32 with fp32
//     accumulation; activations, norms, RoPE, softmax and the residual stream stay fp32;
//   - DecoderOptions::device_kv = DeviceKvMode::Resident (default): the decoder owns a
//     cuda::DeviceKvCache (the model's geometry, options.kv_type) that attention and the
//     column-sum pass read through a DeviceKvLayerView. A DeviceKvMirror attached to the host
//     cache replays the engine's mutations on it (one compaction per layer for the keeps since the
//     layer was last read; merged, re-rotated or codebook rows re-uploaded from the host), flushed
//     for layer l before layer l's new K/V are appended. Each block's post-RoPE K/V are appended
//     to the device cache straight from the projection's buffers; the host cache is appended from
//     a download of the block's rows only: O(new tokens) device->host per layer per call.
//   - DeviceKvMode::PackedUpload (the reference path): the layer's whole host cache is copied to
//     the device before attention, O(cache bytes of the layer) host->device per layer per call.
//   - An unfolded cache (gqa_mode = unfold) is refused with a UsageError in both modes; so are
//     re-assigned positions that differ between the KV heads of a layer.
//   - snapshot()/restore(): the host cache and position, plus a device-to-device copy of the
//     device cache in Resident mode (restore uploads nothing).
//   - ObservationRequest::window_attention: right after a layer's append, before its observer runs,
//     cuda::window_attention fills one device buffer [n_kv][G][W][max_len] from the device cache
//     (LayerSignals::window_attention, device memory; reused layer after layer). Resident mode
//     only, and not over re-assigned positions; otherwise the signal stays empty.
//   - Attention: cuda::ragged_attention over the device cache (split-K for decode, tiles for a
//     prompt); with DecoderOptions::prefill_attention = FlashInfer, blocks of more than one token
//     that need no row statistics go through cuda::flashinfer_prefill (flashinfer_prefill.h).
// tests/core/cuda_decoder_test.cpp and tests/core/device_kv_decoder_gpu_test.cpp compare it with the
// CPU decoder when a GPU is present; they passed on an H200 on 2026-12-04 (docs/CUDA.md).
#include <memory>

#include "core/decode/decoder.h"

namespace kvevict {

namespace cuda {
class DeviceKvCache;
}

// Throws RuntimeError when the CUDA runtime or cuBLAS cannot start on device options.device_ordinal.
std::unique_ptr<Decoder> make_cuda_decoder(const Model& model, const DecoderOptions& options = {});

// The device-resident cache of a decoder made by make_cuda_decoder, its mirror flushed first so it
// holds what the host cache holds (for tests and inspection; synchronises nothing itself).
// nullptr for another decoder or in DeviceKvMode::PackedUpload.
const cuda::DeviceKvCache* synced_device_kv_cache(Decoder& decoder);

}  // namespace kvevict
