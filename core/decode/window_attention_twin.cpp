// Planning and the CPU twin of the window attention kernel; contracts in window_attention_twin.h.
#include "core/decode/window_attention_twin.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/decode/device_kv_view_checks.h"
#include "core/util/error.h"

namespace kvevict {

namespace {

void refuse(const std::string& what) { throw UsageError("window attention: " + what); }

// The checks of every plan; returns the longest head.
int64_t check_problem(const DeviceKvLayerView& view, int W, int group, const WindowPlanOptions& o) {
  const int64_t longest = check_layer_view_for_kernel(view, group, kWindowMaxHeadDim, "window attention");
  const int64_t n_heads = int64_t(view.n_heads) * group;
  if (W < 0) refuse("window W " + std::to_string(W) + " is negative");
  // Rows of a head (g * W + w) and query offsets are ints in the kernel; a row tile may reach
  // kWindowMaxRows past the last row.
  if (int64_t(group) * W > INT_MAX - kWindowMaxRows || int64_t(W) * n_heads * view.head_dim > INT_MAX)
    refuse("a window of " + std::to_string(W) + " rows is too large for the kernel's indexing");
  if (W > 0 && int64_t(o.query_position0) + W - 1 > INT32_MAX)
    refuse("window positions from query_position0 " + std::to_string(o.query_position0) + " pass INT32_MAX");
  if (o.max_len != 0 && (o.max_len < longest || o.max_len > INT_MAX))
    refuse("row stride max_len " + std::to_string(o.max_len) + " is outside [" + std::to_string(longest) +
           " (the longest head), " + std::to_string(INT_MAX) + "]");
  return longest;
}

bool fits(int rows, int tile_keys, int head_dim) {
  return window_shared_floats(rows, tile_keys, head_dim) * int(sizeof(float)) <= kWindowSharedBytes;
}

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Entries per chunk: the whole row unless the row tiles x stored heads fall short of the target
// and the row is long enough to give each extra block at least min_chunk entries.
int64_t chunk_for(const WindowAttentionPlan& p, const WindowPlanOptions& o) {
  const int64_t row = round_up(std::max<int64_t>(p.max_len, 1), p.tile_keys);
  if (o.chunk > 0) return std::min(round_up(o.chunk, p.tile_keys), row);
  const int64_t blocks = int64_t(p.row_tiles) * p.n_kv;
  const int64_t want = std::max<int64_t>(1, (o.target_blocks + blocks - 1) / std::max<int64_t>(blocks, 1));
  int64_t chunk = round_up((row + want - 1) / want, p.tile_keys);
  chunk = std::max(chunk, round_up(std::max<int64_t>(1, o.min_chunk), p.tile_keys));
  const int64_t cap = std::max(1, o.max_chunks);
  if ((row + chunk - 1) / chunk > cap) chunk = round_up((row + cap - 1) / cap, p.tile_keys);
  return std::min(chunk, row);
}

}  // namespace

WindowAttentionPlan plan_window_attention(const DeviceKvLayerView& view, int W, int group,
                                          const WindowPlanOptions& options) {
  const int64_t longest = check_problem(view, W, group, options);
  WindowAttentionPlan p;
  p.W = W;
  p.n_kv = view.n_heads;
  p.group = group;
  p.n_heads = view.n_heads * group;
  p.head_dim = view.head_dim;
  p.query_position0 = options.query_position0;
  p.causal = options.causal;
  p.scale = options.scaled ? 1.0f / std::sqrt(static_cast<float>(view.head_dim)) : 1.0f;
  p.max_len = options.max_len != 0 ? options.max_len : longest;
  // Rows per block: a power of two, enough for the head's group * W rows when they are few (more
  // rows share each key tile), then the largest tile and row count the shared memory takes.
  const int rows = group * W;
  int r = 1;
  while (r < rows && r < kWindowMaxRows) r *= 2;
  while (r > 1 && !fits(r, 32, p.head_dim)) r /= 2;
  p.rows_per_block = r;
  p.tile_keys = fits(r, 64, p.head_dim) ? 64 : 32;
  p.threads_per_row = kWindowThreads / r;
  p.shared_floats = window_shared_floats(r, p.tile_keys, p.head_dim);
  p.row_tiles = (rows + r - 1) / r;
  p.out_floats = size_t(p.n_kv) * size_t(group) * size_t(W) * size_t(p.max_len);
  p.chunk = chunk_for(p, options);
  p.chunks = static_cast<int>(std::max<int64_t>(1, (p.max_len + p.chunk - 1) / p.chunk));
  if (int64_t(p.row_tiles) * p.chunks > INT_MAX)
    refuse(std::to_string(p.row_tiles) + " row tiles of " + std::to_string(p.chunks) + " chunks are too many blocks");
  p.partial_floats = p.chunks > 1 ? size_t(p.n_kv) * size_t(group) * size_t(W) * size_t(p.chunks) * 2 : 0;
  return p;
}

void check_plan_fits(const DeviceKvLayerView& view, const WindowAttentionPlan& plan) {
  if (view.n_heads != plan.n_kv || view.head_dim != plan.head_dim)
    refuse("the plan was made for another layer shape (" + std::to_string(plan.n_kv) + " heads of " +
           std::to_string(plan.head_dim) + ")");
  const int64_t chunks = plan.chunk > 0 ? (plan.max_len + plan.chunk - 1) / plan.chunk : 0;
  if (plan.tile_keys <= 0 || plan.chunk <= 0 || plan.chunk % plan.tile_keys != 0 ||
      plan.chunks != std::max<int64_t>(1, chunks))
    refuse("the plan's chunks (" + std::to_string(plan.chunks) + " of " + std::to_string(plan.chunk) +
           " entries) do not cover its rows of " + std::to_string(plan.max_len) + " in key tiles");
  // The fields derived from the shape, as plan_window_attention derives them: a plan edited after
  // planning (another W, group or row count) would otherwise pass the launchers' buffer checks
  // against sizes it no longer has.
  const int rows = plan.group * plan.W, r = plan.rows_per_block;
  const size_t rows_out = size_t(plan.n_kv) * size_t(plan.group) * size_t(plan.W);
  const bool consistent =
      plan.W >= 0 && plan.group >= 1 && plan.n_heads == plan.n_kv * plan.group && r >= 1 && r <= kWindowMaxRows &&
      (r & (r - 1)) == 0 && plan.threads_per_row * r == kWindowThreads && plan.row_tiles == (rows + r - 1) / r &&
      plan.shared_floats == window_shared_floats(r, plan.tile_keys, plan.head_dim) &&
      plan.out_floats == rows_out * size_t(plan.max_len) &&
      plan.partial_floats == (plan.chunks > 1 ? rows_out * size_t(plan.chunks) * 2 : 0) &&
      int64_t(plan.row_tiles) * plan.chunks <= INT_MAX;
  if (!consistent) refuse("the plan's derived sizes do not match its shape (a plan changed after planning)");
  if (const int h = window_uncovered_head(plan, view); h >= 0)
    refuse("stored head " + std::to_string(h) + " has " + std::to_string(view.length[h]) +
           " entries; the plan's row stride is " + std::to_string(plan.max_len));
}

namespace {

// One block, phase by phase for every thread; the loops mirror window_attention_kernel and
// window_chunk_kernel in cuda/window_attention.cu (keep them identical): pass 1 over the block's
// chunk, then pass 2 (one chunk) or the chunk's stored partial (split).
void run_block(const WindowAttentionArgs& a, int x, int kv, std::vector<float>& shared,
               std::vector<WindowThreadState>& st) {
  const WindowAttentionPlan& p = a.plan;
  const WindowBlock b = window_block(a, x, kv);
  const WindowShared s = window_shared(p, shared.data());
  for (int t = 0; t < kWindowThreads; ++t) {
    st[t] = WindowThreadState{};
    window_load_queries(a, b, s, t);
  }
  for (int64_t t0 = b.k0; t0 < window_keys_end(b); t0 += p.tile_keys) {
    for (int t = 0; t < kWindowThreads; ++t)
      ragged_load_tile(a.kv.keys, a.kv.type, b.base_row, p.head_dim, t0, window_keys_end(b), p.tile_keys, s.k, t,
                     kWindowThreads);
    for (int t = 0; t < kWindowThreads; ++t) window_scores(a, b, s, t0, t, st[t]);
  }
  for (int t = 0; t < kWindowThreads; ++t) window_publish(s, t, st[t]);
  if (p.chunks > 1) {
    for (int t = 0; t < kWindowThreads; ++t) window_store_chunk_partial(a, b, s, t);
  } else {
    for (int t = 0; t < kWindowThreads; ++t) window_normalise(a, b, s, t);
  }
}

// The split's second kernel: one block, every thread.
void run_normalise_block(const WindowAttentionArgs& a, int x, int kv) {
  const WindowBlock b = window_block(a, x, kv);
  for (int t = 0; t < kWindowThreads; ++t) window_normalise_chunk(a, b, t);
}

}  // namespace

std::vector<float> window_attention_twin(const DeviceKvLayerView& view, const WindowAttentionPlan& plan,
                                         const float* queries) {
  check_plan_fits(view, plan);
  std::vector<float> out(plan.out_floats, NAN);  // an element the blocks do not write shows up
  if (out.empty()) return out;
  WindowAttentionArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.out = out.data();
  std::vector<float> partials(plan.partial_floats);
  a.partials = partials.data();
  std::vector<float> shared(size_t(plan.shared_floats));
  std::vector<WindowThreadState> st(kWindowThreads);
  const int blocks_x = plan.row_tiles * plan.chunks;
  for (int kv = 0; kv < plan.n_kv; ++kv)
    for (int x = 0; x < blocks_x; ++x) run_block(a, x, kv, shared, st);
  if (plan.chunks > 1)
    for (int kv = 0; kv < plan.n_kv; ++kv)
      for (int x = 0; x < blocks_x; ++x) run_normalise_block(a, x, kv);
  return out;
}

WindowAttentionSignal describe_window_attention(const WindowAttentionPlan& plan, const float* data, bool on_device) {
  if (plan.scale != 1.0f / std::sqrt(static_cast<float>(plan.head_dim)))
    throw std::invalid_argument("window attention: the observation signal is scaled; the plan is not");
  WindowAttentionSignal a;
  a.data = data;
  a.on_device = on_device;
  a.causal = plan.causal;
  a.W = plan.W;
  a.query_position0 = plan.query_position0;
  a.group = plan.group;
  a.n_kv = plan.n_kv;
  a.max_len = plan.max_len;
  a.row_stride = plan.max_len;
  a.group_stride = plan.W * plan.max_len;
  a.kv_stride = plan.group * a.group_stride;
  return a;
}

}  // namespace kvevict
