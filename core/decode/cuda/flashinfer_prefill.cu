// FlashInfer prefill over the device-resident cache; contract in flashinfer_prefill.h. This file
// converts the queries to the cache's 16-bit type and the output back, and calls FlashInfer once
// per stored head through flashinfer/flashinfer_kernels.h (the only file that includes it).
#include "core/decode/cuda/flashinfer_prefill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "core/decode/cuda/launch_status.h"
#include "core/util/error.h"
#ifdef KVEVICT_HAVE_FLASHINFER
#include "core/decode/cuda/flashinfer/flashinfer_kernels.h"
#endif

namespace kvevict::cuda {

#ifdef KVEVICT_HAVE_FLASHINFER
namespace {

constexpr int kThreads = 256;

void check_launch(const char* kernel) {
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA ") + kernel + ": " + cudaGetErrorString(e));
}

// f32 [count] -> the cache's 16-bit words (round to nearest even, as the host KVCache converts).
__global__ void to_16bit_kernel(const float* in, uint16_t* out, int64_t count, bool bf16) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  out[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(in[i])) : __half_as_ushort(__float2half_rn(in[i]));
}

// FlashInfer's per-head outputs [n_kv][n][group][d] (16-bit) -> out [n][n_kv * group][d] f32.
__global__ void gather_output_kernel(const uint16_t* staged, float* out, int n, int n_kv, int group, int head_dim,
                                     bool bf16) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = int64_t(n) * n_kv * group * head_dim;
  if (i >= total) return;
  const int c = int(i % head_dim);
  const int64_t row = i / head_dim;  // (query, query head) in out's order
  const int head = int(row % (int64_t(n_kv) * group)), query = int(row / (int64_t(n_kv) * group));
  const int kv = head / group, g = head % group;
  const uint16_t w = staged[((int64_t(kv) * n + query) * group + g) * head_dim + c];
  out[i] = bf16 ? __bfloat162float(__ushort_as_bfloat16(w)) : __half2float(__ushort_as_half(w));
}

unsigned blocks_for(int64_t count) { return unsigned((count + kThreads - 1) / kThreads); }

}  // namespace
#endif

bool flashinfer_prefill_built() {
#ifdef KVEVICT_HAVE_FLASHINFER
  return true;
#else
  return false;
#endif
}

bool flashinfer_prefill_supports(KvType type, int head_dim) {
#ifdef KVEVICT_HAVE_FLASHINFER
  return (type == KvType::F16 || type == KvType::BF16) && flashinfer_glue::supports_head_dim(head_dim);
#else
  (void)type, (void)head_dim;
  return false;
#endif
}

bool flashinfer_prefill_applies(const DeviceKvLayerView& view, int n) {
  if (n < 1 || view.n_heads < 1 || !flashinfer_prefill_supports(view.type, view.head_dim)) return false;
  for (int h = 0; h < view.n_heads; ++h)
    if (view.length[h] < n || view.length[h] > int64_t(UINT32_MAX)) return false;
  return true;
}

size_t flashinfer_prefill_staging_elements(const DeviceKvLayerView& view, int n, int group) {
  return size_t(n > 0 ? n : 0) * size_t(view.n_heads > 0 ? view.n_heads : 0) * size_t(group > 0 ? group : 0) *
         size_t(view.head_dim > 0 ? view.head_dim : 0);
}

void flashinfer_prefill(const DeviceKvLayerView& view, int n, int group, const float* queries, float* out,
                        uint16_t* staging, size_t staging_elements) {
  if (!flashinfer_prefill_applies(view, n) || group < 1)
    throw UsageError("flashinfer_prefill: this call does not apply (needs an F16/BF16 cache, head_dim 64 or 128, and "
                     "every head holding its block's entries)");
  const size_t elements = flashinfer_prefill_staging_elements(view, n, group);
  if (staging == nullptr || staging_elements < 2 * elements)
    throw UsageError("flashinfer_prefill: staging holds " + std::to_string(staging_elements) + " elements; " +
                     std::to_string(2 * elements) + " needed");
#ifdef KVEVICT_HAVE_FLASHINFER
  const bool bf16 = view.type == KvType::BF16;
  const int n_heads = view.n_heads * group, d = view.head_dim;
  uint16_t* q16 = staging;
  uint16_t* o16 = staging + elements;
  to_16bit_kernel<<<blocks_for(int64_t(elements)), kThreads>>>(queries, q16, int64_t(elements), bf16);
  check_launch("to_16bit_kernel");
  for (int kv = 0; kv < view.n_heads; ++kv) {
    flashinfer_glue::SingleHeadPrefill p;
    p.q = q16 + size_t(kv) * group * d;  // query heads kv * group .. of row 0
    p.k = static_cast<const uint16_t*>(view.keys) + size_t(view.base_row[kv]) * d;
    p.v = static_cast<const uint16_t*>(view.values) + size_t(view.base_row[kv]) * d;
    p.o = o16 + size_t(kv) * n * group * d;
    p.qo_len = uint32_t(n);
    p.kv_len = uint32_t(view.length[kv]);
    p.group = uint32_t(group);
    p.head_dim = uint32_t(d);
    p.q_stride_n = uint32_t(n_heads * d);
    p.q_stride_h = uint32_t(d);
    p.kv_stride_n = uint32_t(d);
    p.sm_scale = 1.0f / std::sqrt(float(d));
    p.bf16 = bf16;
    const std::string error = flashinfer_glue::run_single_prefill(p);
    if (!error.empty()) throw RuntimeError("FlashInfer prefill (stored head " + std::to_string(kv) + "): " + error);
    check_launch("FlashInfer SinglePrefillWithKVCache");
  }
  gather_output_kernel<<<blocks_for(int64_t(elements)), kThreads>>>(o16, out, n, view.n_heads, group, d, bf16);
  check_launch("gather_output_kernel");
#else
  (void)queries, (void)out;
  throw UsageError("this build has no FlashInfer (scripts/fetch-flashinfer.sh, then cmake -DKVEVICT_FLASHINFER_DIR=...)");
#endif
}

}  // namespace kvevict::cuda
