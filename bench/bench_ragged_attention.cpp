// Benchmark of the ragged attention kernels (core/decode/cuda/ragged_attention.h) on one layer of
// a Llama-3.1-8B geometry (32 query heads, 8 KV heads, head_dim 128, F16 cache):
//   decode (n = 1) at 4K / 32K / 128K entries per head on average and at 3% of those, heads uneven
//   (1/8 to 15/8 of the mean): split-K latency and achieved K+V bandwidth, against the old cuda::attention
//   over a packed f32 copy (what the decoder runs today);
//   prefill (n = entries) at 4K / 32K: the tiled kernel's latency and FLOP rate, and column sums;
//   in a build with FlashInfer (-DKVEVICT_FLASHINFER_DIR), FlashInfer's prefill over the same
//   layer at 4K / 32K / 128K (core/decode/cuda/flashinfer_prefill.h) against it;
//   the window attention signal (core/decode/cuda/window_attention.h; SnapKV's and CAKE's W = 32
//   window rows of every query head over the layer) at 4K / 32K / 128K: the planner's split along
//   the cache against one chunk per row, and the largest difference between the two.
// Without the CUDA toolkit or a usable device it prints "skipped: <reason>" and exits 0.
// --cpu runs the same cases through the CPU twin at small sizes (checking the benchmark's own
// setup, planning and reporting) and checks the split plan against a one-chunk plan.
//   bench_ragged_attention [--cpu] [--json] [--iters N]
// Figures from an H200: docs/PERFORMANCE.md "GPU benchmarks on an H200".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "jit/device.h"
#include "core/decode/kv_type.h"
#include "core/decode/ragged_attention_twin.h"
#include "core/decode/window_attention_twin.h"
#include "jit/cuda_driver.h"
#if defined(KVEVICT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/decode/cuda/cuda_kernels.h"
#include "core/decode/cuda/flashinfer_prefill.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/ragged_attention.h"
#include "core/decode/cuda/window_attention.h"
#endif

namespace kvevict {
namespace {

constexpr int kKvHeads = 8, kGroup = 4, kHeadDim = 128;
constexpr int kWindow = 32;  // SnapKV's and CAKE's observation window

// The larger deviation, NaN when either is (std::max would drop a NaN and report a broken kernel
// as exact).
double worse(double worst, double d) { return std::isnan(worst) || std::isnan(d) ? NAN : std::max(worst, d); }

// A window attention plan with every row in one chunk (the kernel before the split).
WindowPlanOptions one_chunk_window() {
  WindowPlanOptions o;
  o.chunk = int64_t(1) << 40;
  return o;
}

struct Options {
  bool cpu = false, json = false;
  int iters = 20;
};

// Head h of a ragged layer of mean length `mean`: (2h + 1) / 8 of the mean, 1/8 to 15/8.
std::vector<int64_t> ragged_lengths(int64_t mean) {
  std::vector<int64_t> lengths;
  for (int h = 0; h < kKvHeads; ++h) lengths.push_back(std::max<int64_t>(1, mean * (kKvHeads + 2 * h - 7) / kKvHeads));
  return lengths;
}

// The layer's view over arenas at `keys` / `values` with heads packed from row 0.
DeviceKvLayerView layer_view(const std::vector<int64_t>& lengths, const void* keys, const void* values) {
  DeviceKvLayerView v;
  v.keys = keys;
  v.values = values;
  v.n_heads = kKvHeads;
  v.head_dim = kHeadDim;
  v.type = KvType::F16;
  int64_t base = 0;
  for (int h = 0; h < kKvHeads; ++h) {
    v.base_row[h] = base;
    v.length[h] = lengths[size_t(h)];
    base += lengths[size_t(h)];
  }
  return v;
}

int64_t total_rows(const std::vector<int64_t>& lengths) {
  int64_t rows = 0;
  for (int64_t l : lengths) rows += l;
  return rows;
}

// K+V bytes one decode call reads (each stored head once: its GQA group shares the tiles).
double kv_bytes(const std::vector<int64_t>& lengths) { return double(total_rows(lengths)) * kHeadDim * 2 * 2; }

// Causal prefill FLOPs: n queries, each seeing on average about half of the n entries, times
// 2 FLOPs per multiply-add for QK and PV.
double prefill_flops(int64_t n) { return 4.0 * double(n) * double(n + 1) / 2 * kHeadDim * kKvHeads * kGroup; }

std::vector<uint16_t> random_words(int64_t rows, uint32_t seed) {
  std::vector<float> f(size_t(rows) * kHeadDim);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : f) x = u(rng);
  std::vector<uint16_t> w(f.size());
  kv_from_f32(KvType::F16, f.data(), w.data(), f.size());
  return w;
}

// Beyond 4096 queries the first 4096 repeat: the timing does not depend on the values, and
// drawing 128K x 32 x 128 normals would take most of the benchmark's time.
std::vector<float> random_queries(int64_t n, uint32_t seed) {
  std::vector<float> q(size_t(n) * kKvHeads * kGroup * kHeadDim);
  const size_t drawn = std::min(q.size(), size_t(4096) * kKvHeads * kGroup * kHeadDim);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t i = 0; i < drawn; ++i) q[i] = normal(rng);
  for (size_t i = drawn; i < q.size(); ++i) q[i] = q[i - drawn];
  return q;
}

void print(const Options& o, const nlohmann::json& row) {
  if (o.json) return;
  std::string line;
  for (const auto& [k, v] : row.items()) line += k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()) + " ";
  std::printf("%s\n", line.c_str());
}

// --cpu: the twin on small sizes; exit status 1 when the split plan disagrees with one chunk.
int run_cpu(const Options& o, nlohmann::json& rows) {
  double worst = 0;
  for (int64_t context : {512, 2048}) {
    for (double fraction : {1.0, 0.03}) {
      const auto lengths = ragged_lengths(std::max<int64_t>(8, int64_t(context * fraction)));
      const auto k = random_words(total_rows(lengths), 1), v = random_words(total_rows(lengths), 2);
      const DeviceKvLayerView view = layer_view(lengths, k.data(), v.data());
      const auto q = random_queries(1, 3);
      const RaggedAttentionPlan plan = plan_ragged_attention(view, 1, kGroup);
      RaggedPlanOptions one;
      one.chunk = total_rows(lengths);
      const double t0 = bench::wall_seconds();
      const RaggedAttentionOutput split = ragged_attention_twin(view, plan, q.data());
      const double seconds = bench::wall_seconds() - t0;
      const RaggedAttentionOutput whole = ragged_attention_twin(view, plan_ragged_attention(view, 1, kGroup, one), q.data());
      for (size_t e = 0; e < split.out.size(); ++e) worst = worse(worst, std::abs(split.out[e] - whole.out[e]));
      nlohmann::json r{{"backend", "cpu-twin"}, {"kind", "decode"}, {"context", context}, {"fraction", fraction},
                       {"chunk", plan.chunk}, {"chunks", plan.max_chunks}, {"us", 1e6 * seconds},
                       {"gb_per_s", kv_bytes(lengths) / seconds / 1e9}};
      print(o, r);
      rows.push_back(r);
    }
  }
  const int64_t n = 128;
  const std::vector<int64_t> lengths(kKvHeads, n);
  const auto k = random_words(total_rows(lengths), 4), v = random_words(total_rows(lengths), 5);
  const DeviceKvLayerView view = layer_view(lengths, k.data(), v.data());
  const auto q = random_queries(n, 6);
  const RaggedAttentionPlan plan = plan_ragged_attention(view, int(n), kGroup);
  const double t0 = bench::wall_seconds();
  const RaggedAttentionOutput out = ragged_attention_twin(view, plan, q.data());
  const double seconds = bench::wall_seconds() - t0;
  const RaggedColumnPlan cp = plan_ragged_column_sums(view, int(n), kGroup, int(n));
  const std::vector<float> cols = ragged_column_sums_twin(view, cp, q.data(), out.row_max.data(), out.row_sum.data());
  double column_total = 0;  // every query's probabilities sum to 1
  for (float c : cols) column_total += c;
  worst = worse(worst, std::abs(column_total / (double(n) * kKvHeads * kGroup) - 1.0));
  nlohmann::json r{{"backend", "cpu-twin"}, {"kind", "prefill"}, {"context", n}, {"us", 1e6 * seconds},
                   {"gflop_per_s", prefill_flops(n) / seconds / 1e9}};
  print(o, r);
  rows.push_back(r);
  {  // The window attention split along the cache (forced: the planner splits only long heads).
    const auto wl = ragged_lengths(2048);
    const auto wk = random_words(total_rows(wl), 7);
    DeviceKvLayerView wv = layer_view(wl, wk.data(), wk.data());
    std::vector<int32_t> positions(size_t(total_rows(wl)));
    for (int h = 0; h < kKvHeads; ++h)
      for (int64_t t = 0; t < wl[size_t(h)]; ++t) positions[size_t(wv.base_row[h] + t)] = int32_t(t);
    wv.positions = positions.data();
    const auto wq = random_queries(kWindow, 8);
    WindowPlanOptions split;
    split.query_position0 = int(wl.back()) - kWindow;
    split.chunk = 512;
    WindowPlanOptions whole = one_chunk_window();
    whole.query_position0 = split.query_position0;
    const WindowAttentionPlan sp = plan_window_attention(wv, kWindow, kGroup, split);
    const double w0 = bench::wall_seconds();
    const std::vector<float> a = window_attention_twin(wv, sp, wq.data());
    const double wseconds = bench::wall_seconds() - w0;
    const std::vector<float> b = window_attention_twin(wv, plan_window_attention(wv, kWindow, kGroup, whole), wq.data());
    double diff = 0;
    for (size_t e = 0; e < a.size(); ++e) diff = worse(diff, std::abs(a[e] - b[e]));
    worst = worse(worst, diff);
    nlohmann::json wr{{"backend", "cpu-twin"}, {"kind", "window_attention"}, {"context", 2048}, {"W", kWindow},
                      {"chunks", sp.chunks}, {"us", 1e6 * wseconds}, {"max_abs_diff_vs_one_chunk", diff}};
    print(o, wr);
    rows.push_back(wr);
  }
  if (!o.json)
    std::printf("self-check: split vs one chunk (attention, window attention) and column sums, worst deviation %.3g\n",
                worst);
  return worst < 1e-4 ? 0 : 1;
}

#if defined(KVEVICT_HAVE_CUDA)
// Microseconds per call of `launch` (one warm-up call first), timed with events on the stream.
template <typename F>
double device_us(int iters, F&& launch) {
  launch();
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaEvent_t start, stop;
  cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  cudaEventRecord(start);
  for (int i = 0; i < iters; ++i) launch();
  cudaEventRecord(stop);
  cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 1e3 * ms / iters;
}

// The old decoder path's input: an f32 packed copy of the layer (keys and values alike), read by
// the old one-block-per-query cuda::attention through an F32 view.
struct OldLayer {
  cuda::DeviceArray<float> kv;
  DeviceKvLayerView view;
  DeviceKvLayerView packed() const { return view; }
};
void pack_old(OldLayer& old, const std::vector<uint16_t>& words, const std::vector<int64_t>& lengths) {
  std::vector<float> f(size_t(total_rows(lengths)) * kHeadDim);
  kv_to_f32(KvType::F16, words.data(), f.data(), f.size());
  old.kv.upload(f);
  old.view = DeviceKvLayerView{};
  old.view.keys = old.view.values = old.kv.data();
  old.view.n_heads = static_cast<int>(lengths.size());
  old.view.head_dim = kHeadDim;
  old.view.type = KvType::F32;
  int64_t base = 0;
  for (size_t h = 0; h < lengths.size(); ++h) {
    old.view.base_row[h] = base;
    old.view.length[h] = lengths[h];
    base += lengths[h];
  }
}

float max_difference(const cuda::DeviceArray<float>& a, const cuda::DeviceArray<float>& b) {
  std::vector<float> x(a.size()), y(b.size());
  a.download(x.data(), x.size());
  b.download(y.data(), y.size());
  double worst = 0;
  for (size_t e = 0; e < x.size(); ++e) worst = worse(worst, std::abs(x[e] - y[e]));
  return static_cast<float>(worst);
}

// One attention call's device buffers for n queries.
struct Buffers {
  cuda::DeviceArray<float> q, out, row_max, row_sum, workspace, out_old, max_old, sum_old;
  Buffers(int64_t n, size_t workspace_floats) {
    q.upload(random_queries(n, 3));
    const size_t rows = size_t(n) * kKvHeads * kGroup;
    out.resize(rows * kHeadDim);
    out_old.resize(rows * kHeadDim);
    row_max.resize(rows);
    row_sum.resize(rows);
    max_old.resize(rows);
    sum_old.resize(rows);
    workspace.resize(std::max<size_t>(workspace_floats, 1));
  }
};

void decode_case(const Options& o, nlohmann::json& rows, const std::vector<uint16_t>& words, const void* arena,
                 int64_t context, double fraction) {
  const auto lengths = ragged_lengths(std::max<int64_t>(8, int64_t(context * fraction)));
  const DeviceKvLayerView view = layer_view(lengths, arena, arena);  // values = keys: same bytes read
  const RaggedAttentionPlan plan = plan_ragged_attention(view, 1, kGroup);
  Buffers b(1, plan.workspace_floats);
  const double us = device_us(o.iters, [&] {
    cuda::ragged_attention(view, plan, b.q.data(), b.out.data(), b.row_max.data(), b.row_sum.data(),
                           b.workspace.data(), b.workspace.size());
  });
  OldLayer old;
  pack_old(old, words, lengths);
  const double old_us = device_us(o.iters, [&] {
    cuda::attention(old.packed(), b.q.data(), 1, kKvHeads * kGroup, kGroup, kHeadDim, b.out_old.data(),
                    b.max_old.data(), b.sum_old.data());
  });
  nlohmann::json r{{"backend", "cuda"}, {"kind", "decode"}, {"context", context}, {"fraction", fraction},
                   {"max_len", *std::max_element(lengths.begin(), lengths.end())}, {"chunk", plan.chunk},
                   {"chunks", plan.max_chunks}, {"us", us}, {"gb_per_s", kv_bytes(lengths) / us / 1e3},
                   {"old_us", old_us}, {"old_gb_per_s", 2 * kv_bytes(lengths) / old_us / 1e3},
                   {"speedup", old_us / us}, {"max_abs_diff_vs_old", max_difference(b.out, b.out_old)}};
  print(o, r);
  rows.push_back(r);
}

// FlashInfer's prefill over the same layer and queries: its latency, FLOP rate and difference
// from the own kernel's output (`own`, empty when the own kernel did not run at this size).
void flashinfer_prefill_row(const DeviceKvLayerView& view, Buffers& b, int64_t n, int iters, double own_us,
                            nlohmann::json& r) {
  if (!cuda::flashinfer_prefill_built()) {
    r["flashinfer"] = "not built (scripts/fetch-flashinfer.sh, cmake -DKVEVICT_FLASHINFER_DIR)";
    return;
  }
  cuda::DeviceArray<uint16_t> staging(2 * cuda::flashinfer_prefill_staging_elements(view, int(n), kGroup));
  cuda::DeviceArray<float> out(b.out.size());
  const double us = device_us(iters, [&] {
    cuda::flashinfer_prefill(view, int(n), kGroup, b.q.data(), out.data(), staging.data(), staging.size());
  });
  r["flashinfer_us"] = us;
  r["flashinfer_tflop_per_s"] = prefill_flops(n) / us / 1e6;
  if (own_us > 0) {
    r["flashinfer_speedup"] = own_us / us;
    r["flashinfer_max_abs_diff_vs_own"] = max_difference(out, b.out);
  }
}

void prefill_case(const Options& o, nlohmann::json& rows, const std::vector<uint16_t>& words, const void* arena,
                  int64_t n) {
  const std::vector<int64_t> lengths(kKvHeads, n);
  const DeviceKvLayerView view = layer_view(lengths, arena, arena);
  const RaggedAttentionPlan plan = plan_ragged_attention(view, int(n), kGroup);
  Buffers b(n, plan.workspace_floats);
  const int iters = n > 8192 ? 1 : std::min(o.iters, 5);
  if (n > 32768) {  // the own kernel would take about a minute per layer: FlashInfer only
    nlohmann::json r{{"backend", "cuda"}, {"kind", "prefill"}, {"context", n}};
    flashinfer_prefill_row(view, b, n, iters, 0, r);
    print(o, r);
    rows.push_back(r);
    return;
  }
  const double us = device_us(iters, [&] {
    cuda::ragged_attention(view, plan, b.q.data(), b.out.data(), b.row_max.data(), b.row_sum.data(),
                           b.workspace.data(), b.workspace.size());
  });
  const RaggedColumnPlan cp = plan_ragged_column_sums(view, int(n), kGroup, int(n));
  cuda::DeviceArray<float> cols(size_t(kKvHeads) * kGroup * n);
  const double col_us = device_us(iters, [&] {
    cuda::ragged_column_sums(view, cp, b.q.data(), b.row_max.data(), b.row_sum.data(), cols.data());
  });
  nlohmann::json r{{"backend", "cuda"}, {"kind", "prefill"}, {"context", n}, {"us", us},
                   {"tflop_per_s", prefill_flops(n) / us / 1e6}, {"column_sums_us", col_us}};
  if (n <= 4096) {  // the old kernel at 32K would take minutes of this benchmark's time
    OldLayer old;
    pack_old(old, words, lengths);
    r["old_us"] = device_us(1, [&] {
      cuda::attention(old.packed(), b.q.data(), int(n), kKvHeads * kGroup, kGroup, kHeadDim, b.out_old.data(),
                      b.max_old.data(), b.sum_old.data());
    });
    r["max_abs_diff_vs_old"] = max_difference(b.out, b.out_old);
  }
  flashinfer_prefill_row(view, b, n, iters, us, r);
  print(o, r);
  rows.push_back(r);
}

// The window attention of one layer (W = 32 rows of every query head, causal, the window at the
// end of the longest head) over uneven heads of mean `context`: the planner's plan (split along
// the cache when the heads are long) against one chunk per row.
void window_case(const Options& o, nlohmann::json& rows, const void* arena, int64_t context) {
  const auto lengths = ragged_lengths(context);
  DeviceKvLayerView view = layer_view(lengths, arena, arena);
  std::vector<int32_t> positions(size_t(total_rows(lengths)));
  for (int h = 0; h < kKvHeads; ++h)
    for (int64_t t = 0; t < lengths[size_t(h)]; ++t) positions[size_t(view.base_row[h] + t)] = int32_t(t);
  cuda::DeviceArray<int32_t> device_positions;
  device_positions.upload(positions);
  view.positions = device_positions.data();
  cuda::DeviceArray<float> q;
  q.upload(random_queries(kWindow, 9));
  WindowPlanOptions planned;
  planned.query_position0 = int(*std::max_element(lengths.begin(), lengths.end())) - kWindow;
  WindowPlanOptions whole = one_chunk_window();
  whole.query_position0 = planned.query_position0;
  const WindowAttentionPlan split = plan_window_attention(view, kWindow, kGroup, planned);
  const WindowAttentionPlan one = plan_window_attention(view, kWindow, kGroup, whole);
  cuda::DeviceArray<float> a(split.out_floats), b(one.out_floats), partials(std::max<size_t>(split.partial_floats, 1));
  const int iters = context > 32768 ? std::min(o.iters, 5) : o.iters;
  const double split_us = device_us(iters, [&] {
    cuda::window_attention(view, split, q.data(), a.data(), a.size(), partials.data(), partials.size());
  });
  const double one_us = device_us(iters, [&] { cuda::window_attention(view, one, q.data(), b.data(), b.size()); });
  nlohmann::json r{{"backend", "cuda"}, {"kind", "window_attention"}, {"context", context}, {"W", kWindow},
                   {"chunks", split.chunks}, {"blocks", int64_t(split.row_tiles) * split.chunks * split.n_kv},
                   {"us", split_us}, {"one_chunk_us", one_us}, {"speedup_vs_one_chunk", one_us / split_us}};
  // The outputs are n_heads * W * longest floats (1 GiB each at 128K): compared at 4K only.
  if (context <= 4096) r["max_abs_diff_vs_one_chunk"] = max_difference(a, b);
  print(o, r);
  rows.push_back(r);
}

int run_gpu(const Options& o, nlohmann::json& rows) {
  // One F16 arena for the largest case; every case's heads are packed from row 0 of it.
  const std::vector<uint16_t> words = random_words(total_rows(ragged_lengths(131072)), 1);
  cuda::DeviceArray<uint16_t> arena;
  arena.upload(words);
  for (int64_t context : {4096, 32768, 131072})
    for (double fraction : {1.0, 0.03}) decode_case(o, rows, words, arena.data(), context, fraction);
  for (int64_t context : {4096, 32768, 131072}) window_case(o, rows, arena.data(), context);
  for (int64_t n : {4096, 32768, 131072}) prefill_case(o, rows, words, arena.data(), n);
  return 0;
}
#endif

int run(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--cpu") o.cpu = true;
    else if (arg == "--json") o.json = true;
    else if (arg == "--iters" && a + 1 < argc) o.iters = std::max(1, std::atoi(argv[++a]));
    else {
      std::fprintf(stderr, "usage: bench_ragged_attention [--cpu] [--json] [--iters N]\n");
      return 2;
    }
  }
  nlohmann::json rows = nlohmann::json::array();
  int status = 0;
  std::string skipped;
  if (o.cpu) {
    status = run_cpu(o, rows);
  } else {
    skipped = jit::cuda_unavailable_reason();
#if defined(KVEVICT_HAVE_CUDA)
    if (skipped.empty()) status = run_gpu(o, rows);
#endif
  }
  if (!skipped.empty() && !o.json) std::printf("bench_ragged_attention: skipped: %s\n", skipped.c_str());
  if (o.json) {
    nlohmann::json doc{{"geometry", {{"query_heads", kKvHeads * kGroup}, {"kv_heads", kKvHeads}, {"head_dim", kHeadDim},
                                     {"type", "f16"}}},
                       {"runs", rows}};
    if (!skipped.empty()) doc["skipped"] = skipped;
    std::printf("%s\n", doc.dump(2).c_str());
  }
  return status;
}

}  // namespace
}  // namespace kvevict

int main(int argc, char** argv) {
  try {
    return kvevict::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ragged_attention: %s\n", e.what());
    return 1;
  }
}
