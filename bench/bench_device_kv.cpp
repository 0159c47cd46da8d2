// GPU micro-benchmark of the device-resident KV cache (core/decode/cuda/device_kv_cache.h) on a
// Llama-8B geometry (32 layers, 8 KV heads, head_dim 128, f16): prefill append, one-token decode
// appends, compaction to half (in place, and score-ordered through scratch), D2O's merge of one
// decode step on the device (nearest kept key and fold per head), H2O's accumulated attention in one
// decode step on the device (add the step's column sums, keep all but one entry per head) against
// the download of those sums it replaced, SpindleKV's codebook match of one decode step on the
// device against the host path it replaced, ExpectedAttention's prompt query statistics of one
// layer against the download of its queries, the segment-local attention A_seg of one layer
// (NonCausalAttnPress, ChunkPress) against the download of the queries, DefensiveKV's projected
// value norms of one layer against the host's loop, KVzip's replay attention of one layer and chunk
// against the downloads it replaced, snapshot and restore bandwidth. Prints "skipped: <why>"
// and exits 0 without the CUDA toolkit or a usable device.
// Figures from an H200: docs/PERFORMANCE.md "GPU benchmarks on an H200".
//   bench_device_kv [prompt_tokens = 8192] [restores = 8]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_common.h"
#include "jit/device.h"
#include "jit/cuda_driver.h"
#if defined(KVEVICT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/decode/cuda/cache_rows.h"
#include "core/decode/cuda/device_kv_cache.h"
#include "core/decode/cuda/device_memory.h"
#include "core/decode/cuda/query_statistics.h"
#include "core/decode/cuda/replay_attention.h"
#include "core/decode/cuda/segment_attention.h"
#include "core/decode/kv_type_scalar.h"
#include "core/decode/rope.h"
#include "core/engine/accumulated_attention_store.h"
#include "core/engine/model_signals.h"
#endif

namespace kvevict {
namespace {

#if defined(KVEVICT_HAVE_CUDA)
// Seconds of `work` after the device is idle, waiting for its last kernel.
template <typename F>
double timed(F&& work) {
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  const double t0 = bench::wall_seconds();
  work();
  cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return bench::wall_seconds() - t0;
}

// ExpectedAttention's prompt query statistics of one layer (core/decode/cuda/query_statistics.h):
// the means and centred sums of the 8B geometry's 32 query heads over `prompt` queries, made on the
// device, against downloading those queries (what the engine summed on the host before). Both
// scale with the prompt: x 32 layers per prompt.
void query_statistics_line(int prompt, int head_dim) {
  const int heads = 32;
  const size_t floats = size_t(prompt) * heads * head_dim;
  std::vector<float> host(floats);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : host) x = normal(rng);
  ModelConfig rope_config;
  rope_config.head_dim = head_dim;
  Rope rope(rope_config);
  rope.reserve(prompt);
  const RopeTableView t = rope.table();
  cuda::DeviceArray<float> queries, cos, sin;
  queries.upload(host);
  cos.upload(std::vector<float>(t.cos, t.cos + size_t(prompt) * t.half));
  sin.upload(std::vector<float>(t.sin, t.sin + size_t(prompt) * t.half));
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
    std::printf("query statistics  skipped: cublasCreate failed\n");
    return;
  }
  cuda::QueryStatisticsBuffer buffer;
  const QueryStatisticsRequest request{true, 4, true};
  const auto compute = [&] {
    buffer.compute(queries.data(), prompt, 0, request, heads, head_dim, RopeStyle::AdjacentPairs, cos.data(),
                   sin.data(), blas);
  };
  compute();  // the scratch's first allocation and cuBLAS's warm-up
  const int reps = 3;
  const double device = timed([&] {
    for (int r = 0; r < reps; ++r) compute();
  });
  const double download = timed([&] {
    for (int r = 0; r < reps; ++r) queries.download(host.data(), floats);
  });
  cublasDestroy(blas);
  std::printf("query statistics  %d queries x %d heads x %d: %.3f ms a layer on the device (mean and covariance); "
              "downloading the queries instead %.3f ms a layer (%.1f MB)\n",
              prompt, heads, head_dim, 1e3 * device / reps, 1e3 * download / reps, floats * 4.0 / 1e6);
}

// The prompt's segment-local attention A_seg of one layer (core/decode/cuda/segment_attention.h) over
// the device cache's layer 0 as the prefill append left it, at kvpress's defaults: NonCausalAttnPress
// (chunks of 256, every query of a chunk, unscaled, non-causal) and ChunkPress (chunks of 1024, the
// last 64 queries of each): made on the device and downloaded (n_heads x prompt floats), against
// what the engine needed before (every query of the prompt and the layer's keys on the host). x 32
// layers per prompt.
void segment_attention_line(const cuda::DeviceKvCache& cache, const DeviceKvGeometry& g, int prompt,
                            const cuda::DeviceArray<float>& queries) {
  const DeviceKvLayerView view = make_layer_view(cache.layout().layer(0), g, cache.keys(0), cache.values(0),
                                                 cache.positions(0));
  const int group = 4;  // 32 query heads over the 8 KV heads
  const size_t query_floats = size_t(prompt) * g.n_heads * group * g.head_dim;
  if (queries.size() < query_floats) {
    std::printf("segment attention  skipped: %zu query floats held, %zu needed\n", queries.size(), query_floats);
    return;
  }
  cuda::SegmentAttentionBuffer buffer;
  const struct {
    const char* name;
    SegmentAttentionRequest request;
  } presses[] = {{"noncausal_attn", {256, 256, false, false}}, {"chunkpress", {1024, 64, true, true}}};
  std::vector<float> host(query_floats);
  const double download = timed([&] { queries.download(host.data(), query_floats); });
  const double key_bytes = double(prompt) * g.n_heads * g.head_dim * 2;
  for (const auto& p : presses) {
    buffer.compute(view, group, queries.data(), prompt, p.request);  // the scratch's first allocation
    const int reps = 3;
    const double device = timed([&] {
      for (int r = 0; r < reps; ++r) buffer.compute(view, group, queries.data(), prompt, p.request);
    });
    std::printf("segment attention  %s, %d positions x 32 heads: %.3f ms a layer on the device (with the download "
                "of %.1f MB); the queries' download alone %.3f ms (%.1f MB), the keys %.1f MB more\n",
                p.name, prompt, 1e3 * device / reps, prompt * 32 * 4.0 / 1e6, 1e3 * download,
                query_floats * 4.0 / 1e6, key_bytes / 1e6);
  }
}

// DefensiveKV's projected value norms out_norm_l1 of one layer (core/decode/cuda/cache_rows.h,
// projected_value_norms.h) over the device cache's layer 0 as restored (the prompt and 64 decode
// appends): every entry through each of the 8B geometry's 32 query heads' slices of a random F16
// W_o (4096 x 128 multiply-adds each, in double), made on the device; against the host's own loop
// (output_norms_l1, what the engine ran before, from host rows), timed here on one KV head's 4
// query heads over 64 entries only (it is linear in the entries). x 32 layers per prompt.
void projected_value_norms_line(const cuda::DeviceKvCache& cache, const DeviceKvGeometry& g, int prompt) {
  const DeviceKvLayerView view = make_layer_view(cache.layout().layer(0), g, cache.keys(0), cache.values(0),
                                                 cache.positions(0));
  const int group = 4, dim = 4096, q_dim = g.n_heads * group * g.head_dim;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> wo(size_t(dim) * q_dim);
  for (uint16_t& w : wo) w = kv_scalar::f32_to_f16(normal(rng));
  cuda::DeviceArray<uint16_t> wo_device;
  wo_device.upload(wo);
  const OutputProjectionView projection{wo_device.data(), KvType::F16, dim, group, q_dim, g.head_dim};
  cuda::CacheRowsBuffer buffer;
  const CacheRowsWanted wanted{.out_norms_l1 = true};
  buffer.fill(view, wanted, {}, projection);  // the buffer's first allocation
  const int reps = 2;
  const double device = timed([&] {
    for (int r = 0; r < reps; ++r) buffer.fill(view, wanted, {}, projection);
  });
  // The host's loop on f32 slices of the same weights, over a few entries of one KV head.
  const int host_entries = std::min(prompt, 64);
  std::vector<float> slices(size_t(group) * dim * g.head_dim), values(size_t(host_entries) * g.head_dim), out(size_t(group) * host_entries);
  for (int q = 0; q < group; ++q)
    for (int i = 0; i < dim; ++i)
      for (int b = 0; b < g.head_dim; ++b)
        slices[(size_t(q) * dim + i) * g.head_dim + b] = kv_scalar::f16_to_f32(wo[size_t(i) * q_dim + size_t(q) * g.head_dim + b]);
  for (float& v : values) v = normal(rng) * 50.0f;
  const double t0 = bench::wall_seconds();
  output_norms_l1(slices.data(), dim, 0, group, g.head_dim, values.data(), host_entries, out.data());
  const double host = bench::wall_seconds() - t0;
  std::printf("projected value norms  %d entries x %d query heads (dim %d, head_dim %d): %.3f ms a layer on the "
              "device; the host's loop %.3f ms for %d entries x %d query heads (one KV head), on this machine's "
              "host\n",
              prompt, g.n_heads * group, dim, g.head_dim, 1e3 * device / reps, 1e3 * host, host_entries, group);
}

// Compaction of every layer to half its entries: in place (ascending kept lists) and
// score-ordered (shuffled lists, through scratch), each from the snapshot.
void compaction_line(cuda::DeviceKvCache& cache, const DeviceKvGeometry& g, const cuda::DeviceKvSnapshot& snap, int len,
                     std::mt19937& rng) {
  cache.restore(snap);
  std::vector<std::vector<int>> half(g.n_heads), shuffled(g.n_heads);
  for (int h = 0; h < g.n_heads; ++h) {
    for (int t = 0; t < len; t += 2) half[h].push_back(t);
    shuffled[h] = half[h];
    std::shuffle(shuffled[h].begin(), shuffled[h].end(), rng);
  }
  const double in_place = timed([&] {
    for (int l = 0; l < g.n_layers; ++l) cache.compact(l, half);
  });
  cache.restore(snap);
  const double gathered = timed([&] {
    for (int l = 0; l < g.n_layers; ++l) cache.compact(l, shuffled);
  });
  std::printf("compact to half (all layers): in place %.3f ms, score-ordered %.3f ms\n", 1e3 * in_place, 1e3 * gathered);
}

// D2O's merge in one decode step (core/decode/row_merges.h, device_kv_merges.h): per layer, every
// head's newest entry's nearest kept key over the other len - 1 (one block each, one download per
// layer), then per head one fold of its key and value into the match.
void d2o_merge_line(cuda::DeviceKvCache& cache, const DeviceKvGeometry& g, const cuda::DeviceKvSnapshot& snap, int len) {
  cache.restore(snap);
  std::vector<int> kept(size_t(len - 1));
  for (int t = 0; t < len - 1; ++t) kept[size_t(t)] = t;
  const std::vector<int> evicted{len - 1};
  RowFolds fold;
  fold.keys = fold.values = true;
  fold.terms = {{.row = len - 1, .weight = 0.5}};
  std::vector<KeptKeySearch> searches;
  for (int h = 0; h < g.n_heads; ++h) searches.push_back({h, kept, evicted});
  const double merge = timed([&] {
    for (int l = 0; l < g.n_layers; ++l) {
      const std::vector<std::vector<KeptKeyMatch>> m = cache.nearest_kept_keys(l, searches);
      for (int h = 0; h < g.n_heads; ++h) {
        fold.folds = {{.target = kept[size_t(m[size_t(h)][0].kept)], .first_term = 0, .terms = 1, .self_weight = 1,
                       .divisor = 2}};
        cache.fold_rows(l, h, fold);
      }
    }
  });
  std::printf("d2o merge step  %d kept x %d heads x %d layers: %.3f ms per token\n", len - 1, g.n_heads, g.n_layers,
              1e3 * merge);
}

// H2O's A_acc in one decode step (core/engine/accumulated_attention_store.h): per layer the step's
// column sums ([32 query heads][len], as the decoder leaves them) added on the device, then every
// head keeps all but its oldest entry (fused into the next step's add); against the download of
// the same sums that the host accumulation needed every layer of every step.
void h2o_accumulate_line(const DeviceKvGeometry& g, int len) {
  const int group = 4, acc_steps = 16;
  const std::vector<float> sums_host(size_t(g.n_heads) * group * size_t(len), 1e-3f);
  cuda::DeviceArray<float> sums;
  sums.upload(sums_host);
  auto store = make_accumulated_attention_store(SelectionDevice::Cuda);
  store->reset(g.n_layers, g.n_heads, group);
  std::vector<int64_t> lengths(size_t(g.n_heads), len);
  for (int l = 0; l < g.n_layers; ++l) store->add(l, lengths, ColumnSumsSignal{sums.data(), g.n_heads * group, len});
  std::vector<int> all_but_first(size_t(len - 1));
  for (int t = 1; t < len; ++t) all_but_first[size_t(t - 1)] = t;
  const double accumulate = timed([&] {
    for (int s = 0; s < acc_steps; ++s)
      for (int l = 0; l < g.n_layers; ++l) {
        for (int h = 0; h < g.n_heads; ++h) store->keep(l, h, all_but_first, len);
        store->add(l, lengths, ColumnSumsSignal{sums.data(), g.n_heads * group, len});  // one appended since
      }
  });
  std::vector<float> down(sums_host.size());
  const double download = timed([&] {
    for (int s = 0; s < acc_steps; ++s)
      for (int l = 0; l < g.n_layers; ++l) sums.download(down.data(), down.size());
  });
  std::printf("h2o accumulate  %d entries x %d query heads x %d layers: %.3f ms per token on the device; "
              "the host path's download of the sums alone %.3f ms\n",
              len, g.n_heads * group, g.n_layers, 1e3 * accumulate / acc_steps, 1e3 * download / acc_steps);
}

// SpindleKV's decode step on codebook layers (core/decode/device_kv_codebook.h): per layer the
// token appended, then matched against its head's book of `codes` codes and overwritten with its
// reconstruction on the device; against the host path it replaced (the block's K and V
// downloaded, then each head's reconstructed row written back). 64K codes is a 128K prompt kept at
// half (the split scan, device_kv_codebook_scan.h), on the first 4 layers (16 GiB of f32 books
// would be all 32), so both lines also give the time per layer.
void codebook_line(cuda::DeviceKvCache& cache, const DeviceKvGeometry& g, const cuda::DeviceKvSnapshot& snap,
                   const cuda::DeviceArray<float>& block, int len, int codes, int layers, std::mt19937& rng) {
  const int64_t stride = int64_t(g.n_heads) * g.head_dim;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int cb_steps = 16;
  cache.restore(snap);
  std::vector<float> unit(size_t(codes) * g.head_dim);
  for (float& x : unit) x = normal(rng) / std::sqrt(float(g.head_dim));
  DeviceCodebookLoad load;
  load.books.resize(size_t(g.n_heads));
  for (DeviceCodebookLoad::Book& b : load.books) b.key_codes = b.value_codes = unit;
  load.theta_key.assign(size_t(g.n_heads), 0.98);
  load.theta_value.assign(size_t(g.n_heads), 0.95);
  for (int l = 0; l < layers; ++l) cache.load_codebooks(l, load);
  ModelConfig rope_config;
  rope_config.head_dim = g.head_dim;
  Rope rope(rope_config);
  rope.reserve(len + cb_steps + 1);
  const double matched = timed([&] {
    for (int s = 0; s < cb_steps; ++s)
      for (int l = 0; l < layers; ++l) {
        const std::vector<int32_t> at(size_t(g.n_heads), len + s);
        cache.append(l, 1, block.data(), block.data(), stride, at);
        cache.codebook_append(l, 1, block.data(), block.data(), stride, len + s, rope.table());
      }
  });
  std::vector<float> row(size_t(stride) * 2);
  const std::vector<int32_t> position{len};
  const double host_path = timed([&] {
    for (int s = 0; s < cb_steps; ++s)
      for (int l = 0; l < layers; ++l) {
        block.download(row.data(), size_t(stride) * 2);
        for (int h = 0; h < g.n_heads; ++h)
          cache.write_rows(l, h, cache.layout().length(l, h) - 1, 1, row.data() + size_t(h) * g.head_dim,
                           row.data() + size_t(h) * g.head_dim, position.data());
      }
  });
  std::printf("spindlekv codebook  %d codes x %d heads x %d layers: %.3f ms per token on the device (%.3f ms a "
              "layer); the host path's row download and re-upload alone %.3f ms\n",
              codes, g.n_heads, layers, 1e3 * matched / cb_steps, 1e3 * matched / cb_steps / layers,
              1e3 * host_path / cb_steps);
  for (int l = 0; l < layers; ++l) cache.load_codebooks(l, DeviceCodebookLoad{});  // the books' memory back
}

// KVzip's replay attention of one layer and one replay chunk (core/decode/cuda/replay_attention.h)
// over the device cache's layer 0 as restored, its last R entries taken as the replay block: kvpress's
// defaults (a chunk of 2048 behind 4 sinks, R = 2048 + 22 prompt tokens, or half the cache when
// shorter), made on the device and downloaded (32 x chunk floats), against what the replay observer
// needed before on a CUDA decoder: the block's queries and the layer's keys on the host (and the
// attention itself there: R x 32 x (sinks + chunk + R / 2) dot products of head_dim). x 32 layers per
// chunk, and one chunk per 2048 context tokens.
void replay_attention_line(const cuda::DeviceKvCache& cache, const DeviceKvGeometry& g) {
  const DeviceKvLayerView view = make_layer_view(cache.layout().layer(0), g, cache.keys(0), cache.values(0),
                                                 cache.positions(0));
  const int len = int(view.length[0]), group = 4, heads = g.n_heads * group;
  const int R = std::min(2048 + 22, len / 2), context = len - R;
  const int first = std::max(0, context - 2048);
  const ReplayAttentionRequest request{context, first, context, std::min(4, first), false};
  std::vector<float> host(size_t(R) * heads * g.head_dim);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (float& x : host) x = normal(rng);
  cuda::DeviceArray<float> queries;
  queries.upload(host);
  cuda::ReplayAttentionBuffer buffer;
  buffer.compute(view, group, queries.data(), R, request, {});  // the scratch's first allocation
  const int reps = 3;
  const double device = timed([&] {
    for (int r = 0; r < reps; ++r) buffer.compute(view, group, queries.data(), R, request, {});
  });
  const double download = timed([&] { queries.download(host.data(), host.size()); });
  std::printf("replay attention  chunk of %d behind %d sinks, %d replay rows x %d heads over a %d-entry layer: %.3f ms "
              "a layer on the device (with the download of %.1f MB); the queries' download alone %.3f ms (%.1f MB), the "
              "keys %.1f MB more, and %.1f GFLOP of attention on the host\n",
              context - first, request.sinks, R, heads, len, 1e3 * device / reps, heads * (context - first) * 4.0 / 1e6,
              1e3 * download, host.size() * 4.0 / 1e6, double(len) * g.n_heads * g.head_dim * 2 / 1e6,
              2.0 * R * heads * (request.sinks + (context - first) + R / 2.0) * g.head_dim / 1e9);
}

int run(int prompt, int restores) {
  const DeviceKvGeometry g{32, 8, 128, KvType::F16};
  const int64_t stride = int64_t(g.n_heads) * g.head_dim;
  std::vector<float> host(size_t(prompt) * stride);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : host) x = normal(rng);
  cuda::DeviceArray<float> block;
  block.upload(host);
  cuda::DeviceKvCache cache(g);
  const std::vector<int32_t> zero(g.n_heads, 0);
  const double prefill = timed([&] {
    for (int l = 0; l < g.n_layers; ++l) cache.append(l, prompt, block.data(), block.data(), stride, zero);
  });
  const size_t prefill_bytes = cache.layout().bytes_in_use();
  std::printf("prefill append  %d tokens x %d layers: %.3f ms, %.1f GB/s written\n", prompt, g.n_layers, 1e3 * prefill,
              prefill_bytes / prefill / 1e9);
  // Over the prompt as appended (every head `prompt` long, positions 0 ..), before the decode steps.
  {
    cuda::DeviceArray<float> queries;  // 32 query heads' rows of the prompt, random
    std::vector<float> q(size_t(prompt) * 32 * g.head_dim);
    for (float& x : q) x = 0.1f * normal(rng);
    queries.upload(q);
    segment_attention_line(cache, g, prompt, queries);
  }
  const int steps = 64;
  const double decode = timed([&] {
    for (int s = 0; s < steps; ++s) {
      const std::vector<int32_t> pos(g.n_heads, prompt + s);
      for (int l = 0; l < g.n_layers; ++l) cache.append(l, 1, block.data(), block.data(), stride, pos);
    }
  });
  std::printf("decode append   1 token x %d layers: %.1f us per token\n", g.n_layers, 1e6 * decode / steps);
  query_statistics_line(prompt, g.head_dim);
  const cuda::DeviceKvSnapshot snap = cache.snapshot();
  const int len = prompt + steps;
  compaction_line(cache, g, snap, len, rng);
  d2o_merge_line(cache, g, snap, len);
  h2o_accumulate_line(g, len);
  codebook_line(cache, g, snap, block, len, 1024, g.n_layers, rng);
  codebook_line(cache, g, snap, block, len, 65536, std::min(4, g.n_layers), rng);
  cache.restore(snap);
  const double restore = timed([&] {
    for (int r = 0; r < restores; ++r) cache.restore(snap);
  });
  std::printf("restore         %.1f MB x %d: %.3f ms each, %.1f GB/s\n", snap.bytes() / 1e6, restores,
              1e3 * restore / restores, double(snap.bytes()) * restores / restore / 1e9);
  projected_value_norms_line(cache, g, prompt);
  replay_attention_line(cache, g);  // last: the newest line, cut first by a short slice
  return 0;
}
#endif

}  // namespace
}  // namespace kvevict

int main(int argc, char** argv) {
#if !defined(KVEVICT_HAVE_CUDA)
  (void)argc;
  (void)argv;
  std::printf("skipped: this kvevict was built without the CUDA toolkit\n");
  return 0;
#else
  if (const std::string why = kvevict::jit::cuda_unavailable_reason(); !why.empty()) {
    std::printf("skipped: %s\n", why.c_str());
    return 0;
  }
  const int prompt = argc > 1 ? std::atoi(argv[1]) : 8192;
  const int restores = argc > 2 ? std::atoi(argv[2]) : 8;
  if (prompt < 2 || restores < 1) {
    std::fprintf(stderr, "usage: bench_device_kv [prompt_tokens >= 2] [restores >= 1]\n");
    return 2;
  }
  return kvevict::run(prompt, restores);
#endif
}
