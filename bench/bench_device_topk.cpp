// Per-layer latency of device-side selection (core/engine/cuda/device_selection.h): 8 stored heads
// x {4K, 32K, 128K} entries, budget 3% (4 sinks and 64 recent entries inside it), plain top-k and
// NACL's random share 0.25, positional kept order; GPU time by cudaEvent over repeated launches.
// On the GPU also the engine's cuda LayerSelector per layer, wall time: from host spans (the scores
// uploaded with the positions, the kept lists downloaded) and from its own score buffer (the scores
// already there, as the generated kernels leave them: only the positions go up).
// Without CUDA or a usable device it prints "skipped: <reason>" and exits 0.
//   bench_device_topk [--cpu] [--json]
// --cpu times the CPU twin against the CPU engine's select_head on the host instead (and checks
// that they agree), so the benchmark's own code is exercised without a GPU. The twin emulates a
// block thread by thread: its time says nothing about the kernel's.
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.h"
#include "jit/device.h"
#include "core/engine/device_selection_twin.h"
#include "core/engine/layer_selector.h"
#include "jit/cuda_driver.h"
#if defined(KVEVICT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "core/decode/cuda/device_memory.h"
#include "core/engine/cuda/device_selection.h"
#endif

namespace kvevict {
namespace {

constexpr int kHeads = 8;
const int kLengths[] = {4096, 32768, 131072};
const double kShares[] = {0.0, 0.25};

struct Layer {
  std::vector<std::vector<float>> scores;
  std::vector<std::vector<int32_t>> positions;
  std::vector<HeadSelectionSpec> specs;
  PackedSelectionLayer packed;
  std::vector<devsel::HeadParams> params;
};

Layer make_layer(int length, double share) {
  Layer l;
  std::mt19937 rng(static_cast<unsigned>(length));
  std::normal_distribution<float> normal;
  for (int h = 0; h < kHeads; ++h) {
    std::vector<float> s(static_cast<size_t>(length));
    for (float& x : s) x = normal(rng);
    std::vector<int32_t> p(static_cast<size_t>(length));
    for (int i = 0; i < length; ++i) p[static_cast<size_t>(i)] = i;
    l.scores.push_back(std::move(s));
    l.positions.push_back(std::move(p));
    HeadSelectionSpec spec;
    spec.budget = length * 3 / 100;
    spec.protect_first = 4;
    spec.protect_recent = 64;
    spec.random_share = share;
    spec.seed = 7;
    spec.kv_head = h;
    l.specs.push_back(spec);
    l.params.push_back(device_head_params(spec));
  }
  l.packed = pack_selection_layer(std::vector<std::span<const float>>(l.scores.begin(), l.scores.end()),
                                  std::vector<std::span<const int32_t>>(l.positions.begin(), l.positions.end()));
  return l;
}

struct Row {
  int length;
  // GPU: kernels, selector from host spans, selector from its buffer, the same with the positions
  // held on the device (a device cache's arena: nothing uploaded) (ms per layer); CPU: twin,
  // select_head (third and fourth -1).
  double share, first_ms, second_ms, third_ms = -1, fourth_ms = -1;
};

void print(const std::vector<Row>& rows, bool json, bool cpu) {
  const char* a = cpu ? "twin_ms" : "gpu_ms";
  if (json) {
    std::printf("{\"mode\": \"%s\", \"heads\": %d, \"budget_fraction\": 0.03, \"rows\": [", cpu ? "cpu" : "gpu", kHeads);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::printf("%s{\"length\": %d, \"random_share\": %.2f, \"%s\": %.4f", i ? ", " : "", rows[i].length,
                  rows[i].share, a, rows[i].first_ms);
      if (cpu) std::printf(", \"select_head_ms\": %.4f", rows[i].second_ms);
      else
        std::printf(", \"selector_spans_ms\": %.4f, \"selector_buffer_ms\": %.4f, \"selector_buffer_held_ms\": %.4f",
                    rows[i].second_ms, rows[i].third_ms, rows[i].fourth_ms);
      std::printf("}");
    }
    std::printf("]}\n");
    return;
  }
  for (const Row& r : rows) {
    std::printf("%d heads x %6d entries, budget 3%%, random_share %.2f: %s %.4f", kHeads, r.length, r.share, a,
                r.first_ms);
    if (cpu) std::printf(", select_head %.4f ms", r.second_ms);
    else
      std::printf(" ms; selector from host spans %.4f ms, from its buffer %.4f ms, with the positions held %.4f ms",
                  r.second_ms, r.third_ms, r.fourth_ms);
    std::printf("\n");
  }
}

int run_cpu(bool json) {
  std::vector<Row> rows;
  for (int length : kLengths) {
    for (double share : kShares) {
      const Layer l = make_layer(length, share);
      double t0 = bench::wall_seconds();
      const auto twin = twin_select_heads(l.packed.input, l.params);
      const double twin_s = bench::wall_seconds() - t0;
      t0 = bench::wall_seconds();
      std::vector<std::vector<int>> ref;
      for (int h = 0; h < kHeads; ++h) ref.push_back(select_head(l.scores[h], l.positions[h], l.specs[h]));
      const double ref_s = bench::wall_seconds() - t0;
      if (twin != ref) {
        std::fprintf(stderr, "bench_device_topk: twin and select_head disagree at length %d\n", length);
        return 1;
      }
      rows.push_back({length, share, 1e3 * twin_s, 1e3 * ref_s});
    }
  }
  print(rows, json, true);
  return 0;
}

#if defined(KVEVICT_HAVE_CUDA)
int run_gpu(bool json) {
  const int iters = 20;
  std::vector<Row> rows;
  cuda::DeviceSelector selector;
  cudaEvent_t start, stop;
  cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int length : kLengths) {
    for (double share : kShares) {
      const Layer l = make_layer(length, share);
      cuda::DeviceArray<float> scores;
      cuda::DeviceArray<int32_t> positions, kept(static_cast<size_t>(kHeads) * length), counts(kHeads);
      scores.upload(l.packed.scores);
      positions.upload(l.packed.positions);
      const devsel::SelLayerInput in = repoint(l.packed.input, scores.data(), positions.data());
      const devsel::SelOutput out{kept.data(), length, counts.data()};
      selector.select_heads(in, l.params, out);  // warm-up (and workspace allocation)
      cuda::check(cudaEventRecord(start), "cudaEventRecord");
      for (int i = 0; i < iters; ++i) selector.select_heads(in, l.params, out);
      cuda::check(cudaEventRecord(stop), "cudaEventRecord");
      cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      // The engine's selector: from host spans, then from its buffer holding the same scores.
      const auto engine_selector = make_layer_selector(SelectionDevice::Cuda);
      const std::vector<std::span<const float>> sc(l.scores.begin(), l.scores.end());
      const std::vector<std::span<const int32_t>> pos(l.positions.begin(), l.positions.end());
      engine_selector->select_heads(sc, pos, l.specs);  // warm-up
      double t0 = bench::wall_seconds();
      for (int i = 0; i < iters; ++i) engine_selector->select_heads(sc, pos, l.specs);
      const double spans_ms = 1e3 * (bench::wall_seconds() - t0) / iters;
      const std::vector<int64_t> lengths(kHeads, length);
      float* buffer = engine_selector->layer_score_buffer(0, lengths);
      for (int h = 0; h < kHeads; ++h)
        cuda::check(cudaMemcpy(buffer + layer_score_offset(lengths, h), l.scores[h].data(), l.scores[h].size() * sizeof(float),
                               cudaMemcpyHostToDevice),
                    "upload");
      if (engine_selector->select_heads_from_buffer(0, pos, l.specs) != engine_selector->select_heads(sc, pos, l.specs))
        throw std::runtime_error("the selector's buffer and its host spans select differently");
      cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      t0 = bench::wall_seconds();
      for (int i = 0; i < iters; ++i) engine_selector->select_heads_from_buffer(0, pos, l.specs);
      const double buffer_ms = 1e3 * (bench::wall_seconds() - t0) / iters;
      // The positions where a device cache holds them (LayerSignals::cached_positions): no packing,
      // no upload per selection. Laid as an arena, other values before each head, so that offsets
      // taken from the scores' layout would select differently (the check below).
      std::vector<int32_t> arena;
      CachedPositionsSignal held;
      for (int h = 0; h < kHeads; ++h) {
        arena.insert(arena.end(), 5, -1);
        held.start.push_back(static_cast<int64_t>(arena.size()));
        held.length.push_back(static_cast<int64_t>(l.positions[h].size()));
        arena.insert(arena.end(), l.positions[h].begin(), l.positions[h].end());
      }
      cuda::DeviceArray<int32_t> arena_on_device;
      arena_on_device.upload(arena);
      held.data = arena_on_device.data();
      held.on_device = true;
      if (engine_selector->select_heads_from_buffer(0, pos, l.specs, &held) != engine_selector->select_heads(sc, pos, l.specs))
        throw std::runtime_error("the selector's buffer with held positions and its host spans select differently");
      cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      t0 = bench::wall_seconds();
      for (int i = 0; i < iters; ++i) engine_selector->select_heads_from_buffer(0, pos, l.specs, &held);
      const double held_ms = 1e3 * (bench::wall_seconds() - t0) / iters;
      rows.push_back({length, share, ms / iters, spans_ms, buffer_ms, held_ms});
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  print(rows, json, false);
  return 0;
}
#endif

}  // namespace
}  // namespace kvevict

int main(int argc, char** argv) {
  bool cpu = false, json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--cpu") == 0) cpu = true;
    else if (std::strcmp(argv[i], "--json") == 0) json = true;
    else {
      std::fprintf(stderr, "usage: bench_device_topk [--cpu] [--json]\n");
      return 2;
    }
  }
  try {
    if (cpu) return kvevict::run_cpu(json);
    const std::string why = kvevict::jit::cuda_unavailable_reason();
    if (!why.empty()) {
      std::string quoted;  // the reason as a JSON string body
      for (char c : why) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
      std::printf(json ? "{\"skipped\": \"%s\"}\n" : "skipped: %s\n", json ? quoted.c_str() : why.c_str());
      return 0;
    }
#if defined(KVEVICT_HAVE_CUDA)
    return kvevict::run_gpu(json);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_device_topk: %s\n", e.what());
    return 1;
  }
  return 0;
}
