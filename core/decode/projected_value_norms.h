#pragma once
// The projected value norm out_norm_l1[g, t] = ||W_o,q v_t||_1 (core/engine/model_signals.h; the
// value factor of CriticalKV and DefensiveKV) of a cached value row v_t, for query head q of the
// stored head's group: W_o,q is the [dim][head_dim] slice of the layer's output projection that reads
// query head q's attention output. One element body for the CUDA kernel that makes it where the
// cache lives (core/decode/cuda/cache_rows.cu, through LayerSignals::cache_rows) and its CPU twin
// (cache_rows_twin).
//
// The arithmetic is the host's (output_norms_l1, model_signals.cpp): in double, each output
// feature i's dot product accumulated over b = 0 .. head_dim - 1 in order by explicit fused
// multiply-adds (fma: correctly rounded on the host and the device alike, so no compiler's choice
// to contract or not can part them: core is built with -march=native, where g++ contracts a * b + c
// by default, and nvcc does too), then |.| summed over i = 0 .. dim - 1 in order, rounded to float
// once. So the twin, the kernel and the host's loop give the same bits from the same weights and
// rows.
//
// Cost: dim x head_dim multiply-adds per (entry, query head): on the 8B geometry (dim 4096, head_dim
// 128, 32 query heads) 2.2 T per layer at 128K entries. That is why it is made on the device: the
// host made it from host rows, which brought every row of the prompt to the host.
#include <cmath>
#include <cstdint>

#include "core/decode/kv_type.h"
#include "core/decode/kv_type_scalar.h"
#include "core/util/host_device.h"

namespace kvevict {

// The layer's output projection as the element reads it: W_o,q[i][b] is element
// q * head_stride + i * row_stride + b of `data`, of `type` (the device's F16 copy of W_o, [dim]
// [n_heads * head_dim] row-major: row_stride n_heads * head_dim, head_stride head_dim; or the host's
// f32 slices, LayerSignals::output_projection, [n_heads][dim][head_dim]: row_stride head_dim,
// head_stride dim * head_dim). Plain data, by value in kernel parameters.
struct OutputProjectionView {
  const void* data = nullptr;
  KvType type = KvType::F32;
  int dim = 0;         // output features (the model's width)
  int group = 0;       // query heads per stored head: query head q = stored head * group + g
  int64_t row_stride = 0;
  int64_t head_stride = 0;
};

// Element (q, i, b) of the projection as f32 (the conversion the cache's rows use).
KVEVICT_HOST_DEVICE inline float projection_load(const OutputProjectionView& w, int q, int i, int b) {
  const int64_t at = static_cast<int64_t>(q) * w.head_stride + static_cast<int64_t>(i) * w.row_stride + b;
  if (w.type == KvType::F32) return static_cast<const float*>(w.data)[at];
  const uint16_t word = static_cast<const uint16_t*>(w.data)[at];
  return w.type == KvType::F16 ? kv_scalar::f16_to_f32(word) : kv_scalar::bf16_to_f32(word);
}

// ||W_o,q v||_1 for the head_dim values `v` (f32, host or device memory alike).
KVEVICT_HOST_DEVICE inline float projected_value_l1(const OutputProjectionView& w, int q, const float* v, int head_dim) {
  double l1 = 0;
  for (int i = 0; i < w.dim; ++i) {
    double dot = 0;
    for (int b = 0; b < head_dim; ++b) dot = fma(static_cast<double>(projection_load(w, q, i, b)), static_cast<double>(v[b]), dot);
    l1 += fabs(dot);
  }
  return static_cast<float>(l1);
}

// The widest head_dim the kernel stages in shared memory (kProjectedValueChunk rows of W_o at a
// time) and holds one value row of per thread.
inline constexpr int kProjectedValueMaxHeadDim = 256;
// Output features of W_o staged per pass of the kernel: each thread holds one double per feature.
inline constexpr int kProjectedValueChunk = 16;

}  // namespace kvevict
