// Planning and the CPU twin of the ragged attention kernels; contracts in ragged_attention_twin.h.
#include "core/decode/ragged_attention_twin.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "core/decode/device_kv_view_checks.h"
#include "core/util/error.h"

namespace kvevict {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void refuse(const std::string& what) { throw UsageError("ragged attention: " + what); }

// The checks every plan makes; returns the longest head.
int64_t check_problem(const DeviceKvLayerView& view, int n, int group) {
  const int64_t longest = check_layer_view_for_kernel(view, group, kRaggedMaxHeadDim, "ragged attention");
  if (n < 1) refuse("a block of " + std::to_string(n) + " queries");
  if (static_cast<int64_t>(n) * view.n_heads * group > INT_MAX / kRaggedMaxRows)
    refuse("a block of " + std::to_string(n) + " queries is too large for the kernels' indexing");
  return longest;
}

// Rows per block: a power of two, enough for the rows of one stored head when they are few,
// bounded by the accumulators' registers (R * head_dim <= kRaggedRowDims).
int rows_per_block(int rows, int head_dim) {
  int cap = kRaggedMaxRows;
  while (cap > 1 && cap * head_dim > kRaggedRowDims) cap /= 2;
  int r = 1;
  while (r < rows && r < cap) r *= 2;
  return r;
}

int64_t chunk_for(const RaggedAttentionPlan& p, int64_t longest, const RaggedPlanOptions& o) {
  if (o.chunk > 0) return round_up(o.chunk, p.tile_keys);
  const int64_t blocks = static_cast<int64_t>(p.row_tiles) * p.n_kv;
  const int64_t want = std::max<int64_t>(1, (o.target_blocks + blocks - 1) / blocks);
  int64_t chunk = round_up(std::max<int64_t>(1, (longest + want - 1) / want), p.tile_keys);
  chunk = std::max(chunk, round_up(std::max<int64_t>(1, o.min_chunk), p.tile_keys));
  const int64_t cap = std::max(1, o.max_chunks);
  if ((longest + chunk - 1) / chunk > cap) chunk = round_up((longest + cap - 1) / cap, p.tile_keys);
  return chunk;
}

}  // namespace

RaggedAttentionPlan plan_ragged_attention(const DeviceKvLayerView& view, int n, int group,
                                          const RaggedPlanOptions& options) {
  const int64_t longest = check_problem(view, n, group);
  RaggedAttentionPlan p;
  p.n = n;
  p.n_kv = view.n_heads;
  p.group = group;
  p.n_heads = view.n_heads * group;
  p.head_dim = view.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(view.head_dim));
  const int rows = n * group;
  p.rows_per_block = rows_per_block(rows, p.head_dim);
  p.threads_per_row = kRaggedThreads / p.rows_per_block;
  p.dims_per_thread = (p.head_dim + p.threads_per_row - 1) / p.threads_per_row;
  const int fits64 = ragged_shared_floats(p.rows_per_block, 64, p.head_dim) * int(sizeof(float)) <= kRaggedSharedBytes;
  p.tile_keys = fits64 ? 64 : 32;
  p.shared_floats = ragged_shared_floats(p.rows_per_block, p.tile_keys, p.head_dim);
  p.row_tiles = (rows + p.rows_per_block - 1) / p.rows_per_block;
  p.chunk = chunk_for(p, longest, options);
  const int64_t chunks = std::max<int64_t>(1, (longest + p.chunk - 1) / p.chunk);
  if (chunks > 65535) refuse(std::to_string(chunks) + " chunks per head (chunk " + std::to_string(p.chunk) + ")");
  p.max_chunks = static_cast<int>(chunks);
  if (!p.split()) p.chunk = round_up(std::max<int64_t>(longest, 1), p.tile_keys);
  p.workspace_floats =
      p.split() ? size_t(n) * size_t(p.n_heads) * size_t(p.max_chunks) * size_t(p.head_dim + 2) : size_t(0);
  return p;
}

RaggedColumnPlan plan_ragged_column_sums(const DeviceKvLayerView& view, int n, int group, int max_len) {
  const int64_t longest = check_problem(view, n, group);
  if (max_len < longest)
    refuse("column sums row stride " + std::to_string(max_len) + " is below the longest head (" +
           std::to_string(longest) + ")");
  RaggedColumnPlan p;
  p.n = n;
  p.n_kv = view.n_heads;
  p.group = group;
  p.n_heads = view.n_heads * group;
  p.head_dim = view.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(view.head_dim));
  p.tile_keys = view.head_dim <= 128 ? 64 : 32;
  p.max_len = max_len;
  p.key_tiles = std::max(1, (max_len + p.tile_keys - 1) / p.tile_keys);
  p.shared_floats = p.tile_keys * (p.head_dim + 1) + kRaggedQueryTile * (p.head_dim + 2);
  return p;
}

namespace {

void check_shape(const DeviceKvLayerView& view, int n_kv, int head_dim) {
  if (view.n_heads != n_kv || view.head_dim != head_dim)
    refuse("the plan was made for another layer shape (" + std::to_string(n_kv) + " heads of " +
           std::to_string(head_dim) + ")");
}

}  // namespace

void check_plan_fits(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan) {
  check_shape(view, plan.n_kv, plan.head_dim);
  if (const int h = ragged_uncovered_head(plan, view); h >= 0)
    refuse("stored head " + std::to_string(h) + " has " + std::to_string(view.length[h]) +
           " entries; the plan covers " + std::to_string(plan.chunk * plan.max_chunks));
}

void check_plan_fits(const DeviceKvLayerView& view, const RaggedColumnPlan& plan) {
  check_shape(view, plan.n_kv, plan.head_dim);
  if (const int h = ragged_column_uncovered_head(plan, view); h >= 0)
    refuse("stored head " + std::to_string(h) + " has " + std::to_string(view.length[h]) +
           " entries; the column sums' row stride is " + std::to_string(plan.max_len));
}

namespace {

// One attention block, phase by phase; the loop mirrors attention_kernel in ragged_attention.cu.
void run_block(const RaggedAttentionArgs& a, int row_tile, int chunk, int kv, std::vector<float>& shared,
               std::vector<RaggedThreadState>& st) {
  const RaggedAttentionPlan& p = a.plan;
  const RaggedBlock b = ragged_block(a, row_tile, chunk, kv);
  const RaggedShared s = ragged_shared(p, shared.data());
  for (int t = 0; t < kRaggedThreads; ++t) {
    st[t] = RaggedThreadState{};
    ragged_load_queries(a, b, s, t);
  }
  for (int64_t t0 = b.begin; t0 < b.end; t0 += p.tile_keys) {
    for (int t = 0; t < kRaggedThreads; ++t)
      ragged_load_tile(a.kv.keys, a.kv.type, b.base_row, p.head_dim, t0, b.end, p.tile_keys, s.k, t, kRaggedThreads);
    for (int t = 0; t < kRaggedThreads; ++t) ragged_scores(a, b, s, t0, t);
    for (int t = 0; t < kRaggedThreads; ++t) {
      ragged_rescale(p, s, t, st[t]);
      ragged_load_tile(a.kv.values, a.kv.type, b.base_row, p.head_dim, t0, b.end, p.tile_keys, s.k, t, kRaggedThreads);
    }
    for (int t = 0; t < kRaggedThreads; ++t) ragged_weights(p, s, t, st[t]);
    for (int t = 0; t < kRaggedThreads; ++t) ragged_accumulate(p, s, t, st[t]);
  }
  for (int t = 0; t < kRaggedThreads; ++t) ragged_epilogue(a, b, t, st[t]);
}

// One column-sums block (key tile x, stored head kv), phase by phase; mirrors
// ragged_column_sums_kernel.
void run_column_block(const RaggedColumnArgs& a, int x, int kv, std::vector<float>& shared, std::vector<float>& sums) {
  const RaggedColumnPlan& p = a.plan;
  const RaggedColumnShared s = ragged_column_shared(p, shared.data());
  const int threads = p.tile_keys;
  const int64_t len = a.kv.length[kv], t0 = int64_t(x) * p.tile_keys;
  for (int t = 0; t < threads; ++t)
    ragged_load_tile(a.kv.keys, a.kv.type, a.kv.base_row[kv], p.head_dim, t0, len, p.tile_keys, s.k, t, threads);
  for (int h = kv * p.group; h < (kv + 1) * p.group; ++h) {
    for (int t = 0; t < threads; ++t) sums[t] = 0.0f;
    for (int i0 = ragged_first_query(len, p.n, t0); i0 < p.n; i0 += kRaggedQueryTile) {
      for (int t = 0; t < threads; ++t) ragged_column_load_queries(a, h, i0, s.q, s.stats, t);
      for (int t = 0; t < threads; ++t) sums[t] += ragged_column_accumulate(p, len, t0 + t, i0, s.k, s.q, s.stats, t);
    }
    for (int t = 0; t < threads; ++t) ragged_column_store(a, h, t0 + t, len, sums[t]);
  }
}

}  // namespace

RaggedAttentionOutput ragged_attention_twin(const DeviceKvLayerView& view, const RaggedAttentionPlan& plan,
                                            const float* queries) {
  check_plan_fits(view, plan);
  const size_t qh = size_t(plan.n) * plan.n_heads;
  RaggedAttentionOutput o{std::vector<float>(qh * plan.head_dim), std::vector<float>(qh), std::vector<float>(qh)};
  std::vector<float> workspace(plan.workspace_floats), shared(size_t(plan.shared_floats));
  RaggedAttentionArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.out = o.out.data();
  a.row_max = o.row_max.data();
  a.row_sum = o.row_sum.data();
  a.workspace = workspace.data();
  std::vector<RaggedThreadState> st(kRaggedThreads);
  for (int kv = 0; kv < plan.n_kv; ++kv)
    for (int c = 0; c < plan.max_chunks; ++c)
      for (int r = 0; r < plan.row_tiles; ++r) run_block(a, r, c, kv, shared, st);
  if (plan.split()) {  // the merge kernel: one block per (query, head)
    for (size_t q = 0; q < qh; ++q)
      for (int t = 0; t < kRaggedThreads; ++t)
        ragged_merge(a, int(q / plan.n_heads), int(q % plan.n_heads), t, kRaggedThreads);
  }
  return o;
}

std::vector<float> ragged_column_sums_twin(const DeviceKvLayerView& view, const RaggedColumnPlan& plan,
                                           const float* queries, const float* row_max, const float* row_sum) {
  check_plan_fits(view, plan);
  std::vector<float> out(size_t(plan.n_heads) * plan.max_len);
  RaggedColumnArgs a;
  a.kv = view;
  a.plan = plan;
  a.queries = queries;
  a.row_max = row_max;
  a.row_sum = row_sum;
  a.column_sums = out.data();
  std::vector<float> shared(size_t(plan.shared_floats)), sums(size_t(plan.tile_keys));
  for (int kv = 0; kv < plan.n_kv; ++kv)
    for (int x = 0; x < plan.key_tiles; ++x) run_column_block(a, x, kv, shared, sums);
  return out;
}

}  // namespace kvevict
