// The segment attention runner; contract in segment_attention.h. Keep it step for step with
// segment_attention_twin (core/decode/segment_attention_block.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/segment_attention.h"
#include "core/decode/cuda/window_attention.h"
#include "core/decode/window_attention_twin.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kSumThreads = 256;

// One thread per (query head, segment entry) of the piece.
__global__ void sum_piece_rows_kernel(const float* window, SegmentPiece piece, int group, int n_heads, int64_t n,
                                      float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n_heads) * piece.segment_length) return;
  sum_piece_rows(window, piece, group, n, int(i / piece.segment_length), int(i % piece.segment_length), out);
}

}  // namespace

BlockSegmentAttention SegmentAttentionBuffer::compute(const DeviceKvLayerView& view, int group, const float* queries,
                                                      int n, const SegmentAttentionRequest& request,
                                                      size_t max_piece_floats) {
  if (!segment_attention_applies(view, n) || !request.enabled() || group < 1)
    throw UsageError("segment attention: the view is not a prompt of " + std::to_string(n) +
                     " positions the window attention kernel takes, or the request is not enabled");
  const int n_heads = view.n_heads * group;
  const size_t out_floats = size_t(n_heads) * size_t(n);
  out_.grow(out_floats);
  check(cudaMemset(out_.data(), 0, out_floats * sizeof(float)), "segment attention: zero the output");
  const size_t row = size_t(n_heads) * size_t(view.head_dim);
  // Every piece planned first, so the scratch grows once, before any launch reads it.
  const std::vector<SegmentPiece> pieces = plan_segment_attention(request, n, n_heads, max_piece_floats);
  std::vector<WindowAttentionPlan> plans;
  size_t scratch = 0;
  for (const SegmentPiece& piece : pieces) {
    WindowPlanOptions options;
    options.query_position0 = piece.first_row;
    options.causal = request.causal;
    options.scaled = request.scaled;
    plans.push_back(plan_window_attention(segment_view(view, piece), piece.rows, group, options));
    if (plans.back().max_len != piece.segment_length)
      throw std::logic_error("segment attention: a row stride past the segment");
    scratch = std::max(scratch, plans.back().out_floats + plans.back().partial_floats);
  }
  window_.grow(scratch);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SegmentPiece& piece = pieces[i];
    const WindowAttentionPlan& plan = plans[i];
    float* window = window_.data();
    window_attention(segment_view(view, piece), plan, queries + size_t(piece.first_row) * row, window,
                     plan.out_floats, window + plan.out_floats, plan.partial_floats);
    const int64_t elements = int64_t(n_heads) * piece.segment_length;
    const unsigned blocks = unsigned((elements + kSumThreads - 1) / kSumThreads);
    sum_piece_rows_kernel<<<blocks, kSumThreads>>>(window, piece, group, n_heads, n, out_.data());
    const cudaError_t e = launch_status();
    if (e != cudaSuccess) throw RuntimeError(std::string("CUDA sum_piece_rows_kernel: ") + cudaGetErrorString(e));
  }
  BlockSegmentAttention out{n_heads, n, std::vector<float>(out_floats)};
  out_.download(out.values.data(), out_floats);
  return out;
}

bool SegmentAttentionBuffer::can_hold(const SegmentAttentionRequest& request, int n, int n_heads,
                                      size_t max_piece_floats) const {
  size_t piece = 0;
  for (const SegmentPiece& p : plan_segment_attention(request, n, n_heads, max_piece_floats))
    piece = std::max(piece, size_t(n_heads) * size_t(p.rows) * size_t(p.segment_length));
  // What grow allocates anew (count + a quarter; the old array is freed first).
  const auto growth = [](size_t count, size_t capacity) {
    const size_t need = count + count / 4;
    return need <= capacity ? size_t{0} : need - capacity;
  };
  // The window scratch: the piece's output and its partials (1/32 of it, over the partials' share).
  const size_t more = growth(piece + piece / 32, window_.capacity()) + growth(size_t(n_heads) * size_t(n), out_.capacity());
  if (more == 0) return true;
  size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA segment attention buffer: ") + cudaGetErrorString(e));
  return more * sizeof(float) <= free / 2;
}

}  // namespace kvevict::cuda
