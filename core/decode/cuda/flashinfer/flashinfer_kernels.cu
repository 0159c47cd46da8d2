// FlashInfer's single-request prefill, instantiated for kvevict's caches; see
// flashinfer_kernels.h. FlashInfer is Apache-2.0, fetched from PyPI by scripts/fetch-flashinfer.sh
// and never part of the repository; this file only instantiates and calls it.
#include "core/decode/cuda/flashinfer/flashinfer_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <exception>
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/variants.cuh>

namespace kvevict::cuda::flashinfer_glue {

namespace {

// Plain softmax attention: no custom mask, no sliding window, no soft cap, no ALiBi.
using Variant = flashinfer::DefaultAttention<false, false, false, false>;

template <typename T, uint32_t kHeadDim>
cudaError_t launch(const SingleHeadPrefill& p) {
  using Params = flashinfer::SinglePrefillParams<T, T, T>;
  // One KV head: its stride between heads is never used; the output is [qo_len][group][head_dim].
  Params params(static_cast<T*>(const_cast<void*>(p.q)), static_cast<T*>(const_cast<void*>(p.k)),
                static_cast<T*>(const_cast<void*>(p.v)), /*maybe_custom_mask=*/nullptr, static_cast<T*>(p.o),
                /*lse=*/nullptr, /*maybe_alibi_slopes=*/nullptr, /*num_qo_heads=*/p.group, /*num_kv_heads=*/1,
                p.qo_len, p.kv_len, p.q_stride_n, p.q_stride_h, p.kv_stride_n, /*kv_stride_h=*/p.kv_stride_n,
                kHeadDim, /*window_left=*/-1, /*logits_soft_cap=*/0.0f, p.sm_scale, /*rope_scale=*/1.0f,
                /*rope_theta=*/1e4f);
  // tmp = nullptr: no split along the KV entries (a prefill block has enough query tiles).
  return flashinfer::SinglePrefillWithKVCacheDispatched<kHeadDim, kHeadDim, flashinfer::PosEncodingMode::kNone,
                                                        /*USE_FP16_QK_REDUCTION=*/false, flashinfer::MaskMode::kCausal,
                                                        Variant, Params>(params, /*tmp=*/nullptr, /*stream=*/0);
}

template <typename T>
cudaError_t launch_for(const SingleHeadPrefill& p) {
  return p.head_dim == 64 ? launch<T, 64>(p) : launch<T, 128>(p);
}

}  // namespace

bool supports_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

std::string run_single_prefill(const SingleHeadPrefill& p) {
  if (!supports_head_dim(static_cast<int>(p.head_dim))) return "head_dim " + std::to_string(p.head_dim) + " is not built";
  try {
    const cudaError_t e = p.bf16 ? launch_for<__nv_bfloat16>(p) : launch_for<half>(p);
    // Read (and so clear) the runtime's last error in every case: after a failed launch or
    // attribute call it is still set, and the caller's next launch check would report it as its own.
    const cudaError_t launched = cudaGetLastError();
    if (e != cudaSuccess) return cudaGetErrorString(e);
    if (launched != cudaSuccess) return cudaGetErrorString(launched);
  } catch (const std::exception& error) {  // FLASHINFER_ERROR throws
    cudaGetLastError();
    return error.what();
  }
  return "";
}

}  // namespace kvevict::cuda::flashinfer_glue
