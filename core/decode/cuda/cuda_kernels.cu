// Kernels of the CUDA decoder; contracts and CPU references in cuda_kernels.h.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/cuda_kernels.h"

namespace kvevict::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = 4;            // warps per attention block, each walking every kWarps-th key
constexpr int kMaxDimsPerLane = 8;   // head_dim <= 256

// The layer view travels by value in the kernels' parameters.
static_assert(sizeof(DeviceKvLayerView) <= 4096, "kernel parameters");

unsigned blocks_for(size_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

void check_launch(const char* what) {
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void embed_kernel(const float* embedding, const int* tokens, int n, int dim, float* out) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(n) * dim) return;
  const size_t row = i / dim, col = i % dim;
  out[i] = embedding[size_t(tokens[row]) * dim + col];
}

// One block per row; the sum of squares is reduced in fp32 like the CPU reference.
__global__ void rmsnorm_kernel(const float* x, const float* weight, int dim, float eps, float* y, __half* y_half) {
  __shared__ float partial[kThreads / 32];
  const float* row = x + size_t(blockIdx.x) * dim;
  float sum = 0;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) sum += row[c] * row[c];
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    s = warp_sum(s);
    if (threadIdx.x == 0) partial[0] = s;
  }
  __syncthreads();
  const float inv = 1.0f / sqrtf(partial[0] / dim + eps);
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    const float v = row[c] * inv * weight[c];
    y[size_t(blockIdx.x) * dim + c] = v;
    if (y_half) y_half[size_t(blockIdx.x) * dim + c] = __float2half(v);
  }
}

__global__ void rope_kernel(float* x, int n, int heads, int head_dim, const float* cos, const float* sin,
                            bool adjacent_pairs) {
  const int half = head_dim / 2;
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(n) * heads * half) return;
  const int pair = int(i % half);
  const size_t head_row = i / half;  // row * heads + head
  const size_t row = head_row / heads;
  float* v = x + head_row * head_dim;
  const float c = cos[row * half + pair], s = sin[row * half + pair];
  const int a = adjacent_pairs ? 2 * pair : pair;
  const int b = adjacent_pairs ? 2 * pair + 1 : pair + half;
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * c - x1 * s;
  v[b] = x0 * s + x1 * c;
}

__global__ void swiglu_kernel(float* gate, const float* up, size_t count, __half* out_half) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  const float g = gate[i];
  const float v = g / (1.0f + expf(-g)) * up[i];
  gate[i] = v;
  if (out_half) out_half[i] = __float2half(v);
}

__global__ void add_kernel(float* y, const float* x, size_t count) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < count) y[i] += x[i];
}

__global__ void bias_kernel(float* y, const float* bias, int n, int out) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < size_t(n) * out) y[i] += bias[i % out];
}

__global__ void half_kernel(const float* x, size_t count, __half* y) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < count) y[i] = __float2half(x[i]);
}

// One block per (query row i, query head h), kWarps warps. Warp w walks keys w, w + kWarps, ...;
// its lanes split head_dim for the dot product and the output accumulator. Each warp keeps an
// online softmax (running max m, sum l, accumulator), merged across warps at the end: no score
// array of the context's length exists anywhere.
__global__ void attention_kernel(const DeviceKvLayerView cache, const float* queries, int n, int n_heads, int group,
                                 int head_dim, float scale, float* out, float* row_max, float* row_sum) {
  const int i = blockIdx.x, h = blockIdx.y;
  const int kv = h / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = int(cache.length[kv]);
  const int visible = len - n + i + 1;  // entries [0, visible)
  const float* q = queries + (size_t(i) * n_heads + h) * head_dim;
  const int64_t base = cache.base_row[kv];

  float q_reg[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  const int per_lane = (head_dim + 31) / 32;
  for (int r = 0; r < per_lane; ++r) {
    const int d = lane + 32 * r;
    q_reg[r] = d < head_dim ? q[d] : 0.0f;
    acc[r] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int t = warp; t < visible; t += kWarps) {
    float dot = 0;
    for (int r = 0; r < per_lane; ++r) {
      const int d = lane + 32 * r;
      if (d < head_dim) dot += q_reg[r] * device_kv_load(cache.keys, cache.type, base + t, head_dim, d);
    }
    const float s = warp_sum(dot) * scale;
    const float new_m = fmaxf(m, s);
    const float correction = expf(m - new_m);  // exp(-inf) = 0 on the first key
    const float p = expf(s - new_m);
    l = l * correction + p;
    for (int r = 0; r < per_lane; ++r) {
      const int d = lane + 32 * r;
      acc[r] = acc[r] * correction + (d < head_dim ? p * device_kv_load(cache.values, cache.type, base + t, head_dim, d) : 0.0f);
    }
    m = new_m;
  }

  __shared__ float warp_m[kWarps], warp_l[kWarps];
  extern __shared__ float warp_acc[];  // [kWarps][head_dim]
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
  __syncthreads();
  float total_m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) total_m = fmaxf(total_m, warp_m[w]);
  const float mine = m == -INFINITY ? 0.0f : expf(m - total_m);
  for (int r = 0; r < per_lane; ++r) {
    const int d = lane + 32 * r;
    if (d < head_dim) warp_acc[warp * head_dim + d] = acc[r] * mine;
  }
  __syncthreads();
  float total_l = 0;
  for (int w = 0; w < kWarps; ++w) total_l += warp_m[w] == -INFINITY ? 0.0f : warp_l[w] * expf(warp_m[w] - total_m);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += warp_acc[w * head_dim + d];
    out[(size_t(i) * n_heads + h) * head_dim + d] = total_l > 0 ? sum / total_l : 0.0f;  // no visible entry: 0
  }
  if (threadIdx.x == 0 && row_max) {
    row_max[size_t(i) * n_heads + h] = total_m;
    row_sum[size_t(i) * n_heads + h] = total_l;
  }
}

// One thread per (cache entry t, query head h): loops over the block's queries that see t.
__global__ void column_sums_kernel(const DeviceKvLayerView cache, const float* queries, int n, int n_heads, int group,
                                   int head_dim, float scale, const float* row_max, const float* row_sum,
                                   int max_len, float* column_sums) {
  const int h = blockIdx.y;
  const int kv = h / group;
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int len = int(cache.length[kv]);
  if (t >= max_len) return;
  if (t >= len) {  // past this head's entries: 0, as the ragged kernel writes (no stale memory)
    column_sums[size_t(h) * max_len + t] = 0.0f;
    return;
  }
  const int64_t row = cache.base_row[kv] + t;
  const int first_query = max(0, t - (len - n));  // query i sees t when t <= len - n + i
  float total = 0;
  for (int i = first_query; i < n; ++i) {
    const float* q = queries + (size_t(i) * n_heads + h) * head_dim;
    float dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += q[d] * device_kv_load(cache.keys, cache.type, row, head_dim, d);
    const size_t r = size_t(i) * n_heads + h;
    total += expf(dot * scale - row_max[r]) / row_sum[r];
  }
  column_sums[size_t(h) * max_len + t] = total;
}

__global__ void gather_kernel(const float* src, const int* indices, int count, int width, float* dst) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(count) * width) return;
  const size_t row = i / width, col = i % width;
  dst[i] = src[size_t(indices[row]) * width + col];
}

}  // namespace

void embed(const float* embedding, const int* tokens, int n, int dim, float* out) {
  embed_kernel<<<blocks_for(size_t(n) * dim), kThreads>>>(embedding, tokens, n, dim, out);
  check_launch("embed");
}

void rmsnorm(const float* x, const float* weight, int n, int dim, float eps, float* y, __half* y_half) {
  rmsnorm_kernel<<<n, kThreads>>>(x, weight, dim, eps, y, y_half);
  check_launch("rmsnorm");
}

void rope(float* x, int n, int heads, int head_dim, const float* cos, const float* sin, bool adjacent_pairs) {
  rope_kernel<<<blocks_for(size_t(n) * heads * (head_dim / 2)), kThreads>>>(x, n, heads, head_dim, cos, sin,
                                                                             adjacent_pairs);
  check_launch("rope");
}

void swiglu(float* gate, const float* up, size_t count, __half* out_half) {
  swiglu_kernel<<<blocks_for(count), kThreads>>>(gate, up, count, out_half);
  check_launch("swiglu");
}

void add_inplace(float* y, const float* x, size_t count) {
  add_kernel<<<blocks_for(count), kThreads>>>(y, x, count);
  check_launch("add_inplace");
}

void add_bias_rows(float* y, const float* bias, int n, int out) {
  bias_kernel<<<blocks_for(size_t(n) * out), kThreads>>>(y, bias, n, out);
  check_launch("add_bias_rows");
}

void to_half(const float* x, size_t count, __half* y) {
  half_kernel<<<blocks_for(count), kThreads>>>(x, count, y);
  check_launch("to_half");
}

void attention(const DeviceKvLayerView& cache, const float* queries, int n, int n_heads, int group, int head_dim,
               float* out, float* row_max, float* row_sum) {
  if (head_dim > 32 * kMaxDimsPerLane) throw std::runtime_error("CUDA attention: head_dim above 256 is not supported");
  const dim3 grid(n, n_heads);
  const size_t shared = sizeof(float) * kWarps * head_dim;
  attention_kernel<<<grid, 32 * kWarps, shared>>>(cache, queries, n, n_heads, group, head_dim,
                                                  1.0f / std::sqrt(float(head_dim)), out, row_max, row_sum);
  check_launch("attention");
}

void attention_column_sums(const DeviceKvLayerView& cache, const float* queries, int n, int n_heads, int group,
                           int head_dim, const float* row_max, const float* row_sum, int max_len, float* column_sums) {
  const dim3 grid(blocks_for(size_t(max_len)), n_heads);
  column_sums_kernel<<<grid, kThreads>>>(cache, queries, n, n_heads, group, head_dim, 1.0f / std::sqrt(float(head_dim)),
                                         row_max, row_sum, max_len, column_sums);
  check_launch("attention_column_sums");
}

void gather_rows(const float* src, const int* indices, int count, int width, float* dst) {
  gather_kernel<<<blocks_for(size_t(count) * width), kThreads>>>(src, indices, count, width, dst);
  check_launch("gather_rows");
}

}  // namespace kvevict::cuda
