#pragma once
// Device kernels of the CUDA decoder, with host launchers on the default stream. fp32 data unless
// a name says half. Each launcher mirrors a CPU reference in core/decode (named in its comment).
#include <cuda_fp16.h>

#include <cstdint>

#include "core/decode/device_kv_view.h"

namespace kvevict::cuda {

// out[i][:] = embedding[tokens[i]][:]  (fp32 table). Reference: the copy in cpu_decoder.cpp.
void embed(const float* embedding, const int* tokens, int n, int dim, float* out);
// Reference: cpu::rmsnorm. Writes fp32 `y` and, when y_half is non-null, its fp16 copy (GEMM input).
void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y, __half* y_half);
// Reference: Rope::forward. x is [n][heads][head_dim]; cos/sin are [n][head_dim/2] for the rows' positions.
void rope(float* x, int n, int heads, int head_dim, const float* cos, const float* sin, bool adjacent_pairs);
// gate = silu(gate) * up, and its fp16 copy. Reference: cpu::swiglu.
void swiglu(float* gate, const float* up, size_t count, __half* out_half);
void add_inplace(float* y, const float* x, size_t count);
void add_bias_rows(float* y, const float* bias, int n, int out);
void to_half(const float* x, size_t count, __half* y);

// Causal GQA attention over one layer of the KV cache (reference: block_attention), read through
// a DeviceKvLayerView (by value; rows converted to f32 on load with device_kv_load): KV head h's
// entries are rows [base_row[h], base_row[h] + length[h]) of its arenas, in cache order. That is
// the device-resident cache's layer, or the packed upload of the reference path (F32 rows).
//   query i of the block attends to entries [0, length[h] - n + i] of its KV head h = query / group.
// `row_max` / `row_sum` ([n][n_heads]) receive the softmax statistics when non-null.
void attention(const DeviceKvLayerView& cache, const float* queries, int n, int n_heads, int group, int head_dim,
               float* out, float* row_max, float* row_sum);
// column_sums[h][t] (row stride `max_len`) = sum over block queries i of the probability query head h
// gave entry t of its KV head, recomputed from q, k and the row statistics (no S x S matrix).
void attention_column_sums(const DeviceKvLayerView& cache, const float* queries, int n, int n_heads, int group,
                           int head_dim, const float* row_max, const float* row_sum, int max_len, float* column_sums);
// dst[j][:] = src[indices[j]][:] for j < count, rows of `width` floats (compaction; src != dst).
void gather_rows(const float* src, const int* indices, int count, int width, float* dst);

}  // namespace kvevict::cuda
