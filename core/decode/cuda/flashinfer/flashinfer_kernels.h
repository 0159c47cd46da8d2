#pragma once
// The one function of kvevict that includes FlashInfer (flashinfer_kernels.cu, its own CMake
// target kvevict_flashinfer: FlashInfer's headers and the newer CCCL they need stay out of every
// other translation unit). Plain C++17 and no CUDA types, so kvevict_core's C++20 CUDA sources
// include it. Called by core/decode/cuda/flashinfer_prefill.cu only.
#include <cstdint>
#include <string>

namespace kvevict::cuda::flashinfer_glue {

// One FlashInfer single-request prefill: `group` query heads on one KV head, causal (query i sees
// kv entries [0, kv_len - qo_len + i]), no positional encoding (q and k are post-RoPE), scores
// scaled by sm_scale. q: qo_len rows of `group` heads at q_stride_n / q_stride_h elements; k, v:
// kv_len rows of head_dim at kv_stride_n elements; o: [qo_len][group][head_dim] contiguous. All
// 16-bit: half, or bfloat16 when `bf16`. Device pointers, legacy default stream.
struct SingleHeadPrefill {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  uint32_t qo_len = 0, kv_len = 0, group = 1, head_dim = 0;
  uint32_t q_stride_n = 0, q_stride_h = 0, kv_stride_n = 0;
  float sm_scale = 1.0f;
  bool bf16 = false;
};

// Whether an instantiation exists for this head size (64 or 128).
bool supports_head_dim(int head_dim);

// Launches it; returns "" on success, else FlashInfer's or CUDA's message.
std::string run_single_prefill(const SingleHeadPrefill& p);

}  // namespace kvevict::cuda::flashinfer_glue
