#pragma once
// FlashInfer's prefill attention (tensor cores, FlashAttention-2 style) over one layer of the
// device-resident KV cache: the optional fast path of the CUDA decoder's prefill attention
// (DecoderOptions::prefill_attention = PrefillAttention::FlashInfer; docs/CUDA.md, "FlashInfer
// prefill"). Built only when CMake is given -DKVEVICT_FLASHINFER_DIR (scripts/fetch-flashinfer.sh
// fetches the headers from PyPI); otherwise every entry below says no or refuses. Our own ragged kernel
// (cuda::ragged_attention) stays the reference the GPU test compares it with.
//
// Contract: the same attention as cuda::ragged_attention without the row statistics: n block
// queries per query head, query i of a stored head with len entries sees entries [0, len - n + i]
// (the block's own entries are the head's last n), scores q.k / sqrt(head_dim). Each stored head
// is one FlashInfer single-request prefill (its G query heads on its one KV head, causal with
// kv_len = len, qo_len = n), so the ragged heads need no padding and no copy of the cache.
// Precision: the queries are rounded to the cache's 16-bit type and the output comes back through
// it (FlashInfer reads 16-bit Q, K and V, accumulates in f32 and writes 16-bit O).
// No CUDA types here; launches go to the legacy default stream, nothing is synchronised.
#include <cstddef>
#include <cstdint>

#include "core/decode/device_kv_view.h"

namespace kvevict::cuda {

// Whether this build has FlashInfer's prefill at all.
bool flashinfer_prefill_built();

// Whether the built kernels take a cache of this element type and head size: F16 or BF16, head_dim
// 64 or 128 (the instantiations in flashinfer/flashinfer_kernels.cu). Always false when not built.
bool flashinfer_prefill_supports(KvType type, int head_dim);

// Whether a call of n queries over `view` can use it: supported type and head size, n >= 1, and
// every stored head holds at least its n block entries (len >= n, FlashInfer's causal rule).
bool flashinfer_prefill_applies(const DeviceKvLayerView& view, int n);

// 16-bit staging elements flashinfer_prefill needs: the queries and the output, n * n_heads *
// head_dim each.
size_t flashinfer_prefill_staging_elements(const DeviceKvLayerView& view, int n, int group);

// Attention of n queries per query head: queries and out are [n][n_heads][head_dim] f32 device
// buffers (n_heads = view.n_heads * group); staging is 2 * flashinfer_prefill_staging_elements
// 16-bit elements of device scratch. Throws RuntimeError when FlashInfer refuses or a launch fails,
// UsageError when the call does not apply (flashinfer_prefill_applies) or the staging is too small.
void flashinfer_prefill(const DeviceKvLayerView& view, int n, int group, const float* queries, float* out,
                        uint16_t* staging, size_t staging_elements);

}  // namespace kvevict::cuda
