// The replay attention runner; contract in replay_attention.h. Keep it step for step with
// replay_attention_twin (core/decode/replay_attention_block.cpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/decode/cuda/launch_status.h"
#include "core/decode/cuda/replay_attention.h"
#include "core/decode/cuda/window_attention.h"
#include "core/decode/window_attention_twin.h"
#include "core/util/error.h"

namespace kvevict::cuda {

namespace {

constexpr int kReplayThreads = 256;

// One thread per (stored head, gathered row, element or position: i = -1 .. head_dim - 1).
__global__ void replay_gather_kernel(DeviceKvLayerView view, ReplayAttentionRequest request, int m, void* keys,
                                     int32_t* positions) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t per_row = int64_t(view.head_dim) + 1;
  if (i >= int64_t(view.n_heads) * m * per_row) return;
  const int64_t row = i / per_row;
  replay_gather_element(view, request, m, int(row / m), int(row % m), int(i % per_row) - 1, keys, positions);
}

// One thread per (query head, chunk entry) of the piece.
__global__ void replay_max_kernel(const float* window, ReplayPiece piece, int group, int m, int n_heads,
                                  ReplayAttentionRequest request, const float* factors, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int chunk = request.end - request.first;
  if (i >= int64_t(n_heads) * chunk) return;
  replay_max_piece_rows(window, piece, group, m, request, factors, int(i / chunk), int(i % chunk), out);
}

void check_launch(const char* kernel) {
  const cudaError_t e = launch_status();
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA ") + kernel + ": " + cudaGetErrorString(e));
}

unsigned blocks_for(int64_t threads) { return unsigned((threads + kReplayThreads - 1) / kReplayThreads); }

// The gathered keys in 16-bit words: head_dim words per row, twice that for F32.
size_t gathered_words(int n_kv, int m, int head_dim, size_t word_bytes) {
  return size_t(n_kv) * size_t(m) * size_t(head_dim) * (word_bytes / sizeof(uint16_t));
}

}  // namespace

BlockReplayAttention ReplayAttentionBuffer::compute(const DeviceKvLayerView& view, int group, const float* queries,
                                                    int R, const ReplayAttentionRequest& request,
                                                    const std::vector<double>& factors, size_t max_piece_floats) {
  if (group < 1 || !replay_attention_applies(view, request, R))
    throw UsageError("replay attention: the view is not a replay block of " + std::to_string(R) +
                     " rows after the request's context that the window attention kernel takes");
  if (!factors.empty() && factors.size() != size_t(R))
    throw UsageError("replay attention: " + std::to_string(factors.size()) + " row factors for " + std::to_string(R) +
                     " rows");
  const int n_heads = view.n_heads * group, chunk = request.chunk(), m = replay_gathered_rows(request, R);
  const size_t word = view.type == KvType::F32 ? sizeof(float) : sizeof(uint16_t);
  keys_.grow(gathered_words(view.n_heads, m, view.head_dim, word));
  positions_.grow(size_t(view.n_heads) * size_t(m));
  const int64_t gather_threads = int64_t(view.n_heads) * m * (int64_t(view.head_dim) + 1);
  replay_gather_kernel<<<blocks_for(gather_threads), kReplayThreads>>>(view, request, m, keys_.data(),
                                                                      positions_.data());
  check_launch("replay_gather_kernel");
  const DeviceKvLayerView gathered = replay_gathered_view(view, m, keys_.data(), positions_.data());
  const float* factors_d = nullptr;
  if (!factors.empty()) {
    const std::vector<float> f(factors.begin(), factors.end());
    factors_.resize(f.size());
    factors_.upload(f.data(), f.size());
    factors_d = factors_.data();
  }
  const size_t out_floats = size_t(n_heads) * size_t(chunk);
  out_.grow(out_floats);
  check(cudaMemset(out_.data(), 0, out_floats * sizeof(float)), "replay attention: zero the output");
  // Every piece planned first, so the scratch grows once, before any launch reads it.
  const std::vector<ReplayPiece> pieces = plan_replay_attention(request, R, n_heads, max_piece_floats);
  std::vector<WindowAttentionPlan> plans;
  size_t scratch = 0;
  for (const ReplayPiece& piece : pieces) {
    WindowPlanOptions options;
    options.query_position0 = request.context + piece.first_row;
    plans.push_back(plan_window_attention(gathered, piece.rows, group, options));
    if (plans.back().max_len != m) throw std::logic_error("replay attention: a row stride past the gathered rows");
    scratch = std::max(scratch, plans.back().out_floats + plans.back().partial_floats);
  }
  window_.grow(scratch);
  const size_t row = size_t(n_heads) * size_t(view.head_dim);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ReplayPiece& piece = pieces[i];
    const WindowAttentionPlan& plan = plans[i];
    float* window = window_.data();
    window_attention(gathered, plan, queries + size_t(piece.first_row) * row, window, plan.out_floats,
                     window + plan.out_floats, plan.partial_floats);
    replay_max_kernel<<<blocks_for(int64_t(out_floats)), kReplayThreads>>>(window, piece, group, m, n_heads, request,
                                                                           factors_d, out_.data());
    check_launch("replay_max_kernel");
  }
  BlockReplayAttention out{n_heads, request.first, chunk, std::vector<float>(out_floats)};
  out_.download(out.values.data(), out_floats);
  return out;
}

bool ReplayAttentionBuffer::can_hold(const ReplayAttentionRequest& request, int R, int n_kv, int n_heads, int head_dim,
                                     size_t word_bytes, size_t max_piece_floats) const {
  const int m = replay_gathered_rows(request, R);
  size_t piece = 0;
  for (const ReplayPiece& p : plan_replay_attention(request, R, n_heads, max_piece_floats))
    piece = std::max(piece, size_t(n_heads) * size_t(p.rows) * size_t(m));
  // What grow allocates anew (count + a quarter; the old array is freed first), in bytes.
  const auto growth = [](size_t count, size_t capacity, size_t bytes) {
    const size_t need = count + count / 4;
    return need <= capacity ? size_t{0} : (need - capacity) * bytes;
  };
  // The window scratch: the piece's output and its partials (1/32 of it, over the partials' share).
  const size_t more = growth(gathered_words(n_kv, m, head_dim, word_bytes), keys_.capacity(), sizeof(uint16_t)) +
                      growth(size_t(n_kv) * size_t(m), positions_.capacity(), sizeof(int32_t)) +
                      growth(piece + piece / 32, window_.capacity(), sizeof(float)) +
                      growth(size_t(n_heads) * size_t(request.chunk()), out_.capacity(), sizeof(float)) +
                      growth(size_t(R), factors_.capacity(), sizeof(float));
  if (more == 0) return true;
  size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA replay attention buffer: ") + cudaGetErrorString(e));
  return more <= free / 2;
}

}  // namespace kvevict::cuda
