// bench_gpu_decode: issue 10's end-to-end GPU figures, one run per (context, policy):
//   - time to first token (the prefill with the policy scoring and evicting, through prefill_prompt
//     as generate and eval run it) and the policy's share of it (the engine's own clock);
//   - decode latency per token (median and p90 of --decode-tokens greedy steps, the policy's
//     decode triggers included);
//   - the KV cache bytes after the prefill and their peak during it (the engine's report: CAKE's
//     cascading bounds it), and the device memory in use (total - free: after the load, polled
//     every 2 ms during the prefill for its peak, after the prefill and after decoding);
//   - each policy's decode speed-up over the full cache at the same context.
// Defaults: synthetic:llama3.1-8b (random weights of Llama-3.1-8B's geometry, 128K context),
// contexts 4096, 32768 and 131072, policies full, cake and snapkv at 3% of the prompt, 16 decode
// tokens, scoring auto (the NVRTC-compiled kernels on a CUDA device). A run that would not fit --time-limit (estimated from
// the previous context's prefill, scaled quadratically) is skipped and listed, so a device check
// always ends in time. Without a CUDA build or device it prints why and exits 0 (nothing measured).
//   bench_gpu_decode [--model M] [--contexts 4096,32768] [--policies full,cake] [--budget 3%]
//                    [--decode-tokens N] [--time-limit SECONDS] [--json FILE] [--device cuda|cpu]
//                    [--cache synthetic,prefill] [--kv-path resident|packed]
// --kv-path packed runs the CUDA decoder's reference path (the host cache uploaded per layer and
// call, DeviceKvMode::PackedUpload): the "before" of the device-resident cache.
// --device cpu runs the same protocol on the CPU decoder (small contexts only: a check of the
// benchmark itself on a machine without a GPU).
//
// --cache synthetic,prefill (default: both, synthetic first). `prefill` is the protocol above.
// `synthetic` measures decode latency alone, without the prompt's prefill (whose fp32 attention
// takes minutes at 128K on today's kernels, docs/CUDA.md): the decoder's cache is filled with
// random K/V (the host cache is assigned; the device mirror uploads it) holding, per (layer, KV
// head), the whole context for `full` and budget x context entries for any other policy (a
// uniform stand-in for the policy's kept set, positions evenly spread over the context), then
// --decode-tokens greedy steps run without the engine. Its rows say `cache: synthetic`: the same
// attention work per token as the policy's cache, not the policy's decode-time scoring.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "core/decode/decoder.h"
#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "jit/device.h"
#include "jit/scoring_backend.h"
#ifdef KVEVICT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace kvevict;

namespace {

enum class CacheFill { Synthetic, Prefill };

struct Options {
  std::string model = "synthetic:llama3.1-8b", budget = "3%", device = "cuda", json;
  std::vector<CacheFill> fills = {CacheFill::Synthetic, CacheFill::Prefill};
  DeviceKvMode kv_path = DeviceKvMode::Resident;  // --kv-path packed: the old per-call upload
  std::vector<int> contexts = {4096, 32768, 131072};
  std::vector<std::string> policies = {"full", "cake", "snapkv"};
  int decode_tokens = 16;
  double time_limit = 420;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class T> std::vector<T> split(const std::string& text, T (*parse)(const std::string&)) {
  std::vector<T> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(parse(item));
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw UsageError("bench_gpu_decode: " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--contexts")
      o.contexts = split<int>(v, [](const std::string& s) { return bench::parse_int_option("--contexts", s); });
    else if (a == "--policies") o.policies = split<std::string>(v, [](const std::string& s) { return s; });
    else if (a == "--budget") o.budget = v;
    else if (a == "--decode-tokens") o.decode_tokens = std::max(1, bench::parse_int_option(a, v));
    else if (a == "--time-limit") o.time_limit = bench::parse_double_option(a, v);
    else if (a == "--json") o.json = v;
    else if (a == "--device") o.device = v;
    else if (a == "--kv-path") {
      if (v != "resident" && v != "packed") throw UsageError("bench_gpu_decode: --kv-path takes resident or packed");
      o.kv_path = v == "packed" ? DeviceKvMode::PackedUpload : DeviceKvMode::Resident;
    } else if (a == "--cache") {
      o.fills.clear();
      for (const std::string& f : split<std::string>(v, [](const std::string& x) { return x; })) {
        if (f == "synthetic") o.fills.push_back(CacheFill::Synthetic);
        else if (f == "prefill") o.fills.push_back(CacheFill::Prefill);
        else throw UsageError("bench_gpu_decode: --cache takes synthetic, prefill or both (comma-separated), not " + f);
      }
    }
    else throw UsageError("bench_gpu_decode: unknown option " + a);
  }
  return o;
}

// Device memory in use now (total - free) in bytes; 0 without CUDA.
size_t device_bytes_in_use(const jit::DeviceChoice& device) {
#ifdef KVEVICT_HAVE_CUDA
  if (device.kind == jit::DeviceKind::Cuda) {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return total - free;
  }
#endif
  (void)device;
  return 0;
}

// The largest device_bytes_in_use seen while it lives: a thread polls cudaMemGetInfo every 2 ms
// (a sampled peak: an allocation freed within 2 ms can be missed). Nothing on the CPU.
class DeviceMemoryPeak {
 public:
  explicit DeviceMemoryPeak(const jit::DeviceChoice& device) : device_(device), peak_(device_bytes_in_use(device)) {
    if (device.kind != jit::DeviceKind::Cuda) return;
    poller_ = std::thread([this] {
#ifdef KVEVICT_HAVE_CUDA
      cudaSetDevice(device_.ordinal);
#endif
      while (!stop_.load()) {
        const size_t now_bytes = device_bytes_in_use(device_);
        size_t seen = peak_.load();
        while (now_bytes > seen && !peak_.compare_exchange_weak(seen, now_bytes)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~DeviceMemoryPeak() { stop(); }
  // Stops polling; returns the peak.
  size_t stop() {
    stop_.store(true);
    if (poller_.joinable()) poller_.join();
    return std::max(peak_.load(), device_bytes_in_use(device_));
  }

 private:
  jit::DeviceChoice device_;
  std::atomic<size_t> peak_;
  std::atomic<bool> stop_{false};
  std::thread poller_;
};

int argmax(const std::vector<float>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// One (context, policy) run on a fresh decoder.
nlohmann::json run_one(const Model& model, const Options& o, const jit::DeviceChoice& device, int context,
                       const std::string& policy_name) {
  std::vector<int> prompt(static_cast<size_t>(context));
  for (int i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = 32 + (i * 7919) % 95;  // printable bytes
  std::unique_ptr<PolicyProgram> program;
  std::unique_ptr<EvictionEngine> engine;
  if (policy_name != "full") {
    const auto backend = jit::resolve_scoring("auto", device, "--scoring");
    program = jit::load_scored_policy(policy_name, {}, {}, backend, device);
    engine = std::make_unique<EvictionEngine>(*program, model.config,
                                              EngineOptions{Budget::parse(o.budget), 0});
  }
  auto decoder = make_decoder(model, device.kind == jit::DeviceKind::Cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu,
                              {.device_ordinal = device.ordinal, .device_kv = o.kv_path});
  const size_t mem_loaded = device_bytes_in_use(device);
  DeviceMemoryPeak prefill_peak(device);
  const double t0 = now();
  const std::vector<float>* logits = &prefill_prompt(*decoder, prompt, engine.get(), engine.get());
  const double ttft = now() - t0;
  const size_t mem_peak = prefill_peak.stop();
  const size_t mem_prefill = device_bytes_in_use(device);
  const size_t cache_bytes = decoder->cache().bytes_in_use();
  std::vector<double> steps;
  // As generate and eval decode: the engine observes decode calls only when its policy evicts then
  // (otherwise the device-resident cache is the only cache the decode loop touches).
  ForwardObserver* decode_observer = engine && engine->observes_decode() ? engine.get() : nullptr;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const int next = argmax(*logits);
    const double s = now();
    logits = &decoder->forward(std::span<const int>(&next, 1), decode_observer);
    steps.push_back(now() - s);
  }
  const double engine_seconds = engine ? engine->report().seconds : 0.0;
  return {{"context", context},
          {"policy", policy_name},
          {"cache", "prefill"},
          {"budget", engine ? o.budget : "100%"},
          {"ttft_s", ttft},
          {"engine_s", engine_seconds},
          {"policy_share_of_prefill", ttft > 0 ? engine_seconds / ttft : 0.0},
          {"decode_ms_median", 1e3 * percentile(steps, 0.5)},
          {"decode_ms_p90", 1e3 * percentile(steps, 0.9)},
          {"cache_bytes", cache_bytes},
          {"device_bytes_loaded", mem_loaded},
          {"device_bytes_peak_prefill", mem_peak},
          {"device_bytes_after_prefill", mem_prefill},
          {"cache_bytes_peak_prefill", engine ? engine->report().peak_bytes : cache_bytes},
          {"device_bytes_after_decode", device_bytes_in_use(device)}};
}

// A cache of `entries` random entries per (layer, KV head), positions evenly spread over
// [0, context): what a policy keeping that many entries leaves, as far as attention's cost goes.
KVCache synthetic_cache(const ModelConfig& config, int context, int entries) {
  KVCache cache(config, KvType::F16);
  std::vector<float> key(static_cast<size_t>(config.head_dim)), value(key.size());
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&state] {  // xorshift64*: enough for filler data
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return static_cast<float>(static_cast<double>((state * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  };
  for (int l = 0; l < config.n_layers; ++l)
    for (int h = 0; h < config.n_kv_heads; ++h)
      for (int i = 0; i < entries; ++i) {
        for (size_t c = 0; c < key.size(); ++c) key[c] = uniform(), value[c] = uniform();
        const int32_t position = static_cast<int32_t>(static_cast<int64_t>(i) * context / entries);
        cache.append(l, h, position, key.data(), value.data());
      }
  return cache;
}

// Decode latency over a synthetic cache (no prefill, no engine); see the header comment.
nlohmann::json run_synthetic(const Model& model, const Options& o, const jit::DeviceChoice& device, int context,
                             const std::string& policy_name) {
  const int entries = policy_name == "full"
                          ? context
                          : std::max(1, static_cast<int>(std::lround(Budget::parse(o.budget).tokens_per_head(context))));
  auto decoder = make_decoder(model, device.kind == jit::DeviceKind::Cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu,
                              {.device_ordinal = device.ordinal, .device_kv = o.kv_path});
  const size_t mem_loaded = device_bytes_in_use(device);
  const double t0 = now();
  decoder->cache() = synthetic_cache(model.config, context, entries);
  decoder->set_position(context);
  const double fill = now() - t0;
  const size_t cache_bytes = decoder->cache().bytes_in_use();
  std::vector<double> steps;
  int next = 32;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const double s = now();
    next = argmax(decoder->forward(std::span<const int>(&next, 1)));
    steps.push_back(now() - s);
  }
  // The first step uploads the assigned cache (the mirror's resync): reported apart, not timed.
  const double first_step = steps.front();
  if (steps.size() > 1) steps.erase(steps.begin());
  return {{"context", context},
          {"policy", policy_name},
          {"cache", "synthetic"},
          {"entries_per_head", entries},
          {"budget", policy_name == "full" ? "100%" : o.budget},
          {"fill_s", fill},
          {"first_step_s", first_step},
          {"ttft_s", 0.0},
          {"engine_s", 0.0},
          {"policy_share_of_prefill", 0.0},
          {"decode_ms_median", 1e3 * percentile(steps, 0.5)},
          {"decode_ms_p90", 1e3 * percentile(steps, 0.9)},
          {"cache_bytes", cache_bytes},
          {"device_bytes_loaded", mem_loaded},
          {"device_bytes_after_prefill", device_bytes_in_use(device)},
          {"device_bytes_after_decode", device_bytes_in_use(device)}};
}

void print_row(const nlohmann::json& r) {
  std::printf("%8d %-10s %9.2f %8.2f%% %10.2f %10.2f %12.1f %12.1f\n", r["context"].get<int>(),
              r["policy"].get<std::string>().c_str(),
              r.contains("fill_s") ? r["fill_s"].get<double>() : r["ttft_s"].get<double>(),
              100 * r["policy_share_of_prefill"].get<double>(), r["decode_ms_median"].get<double>(),
              r["decode_ms_p90"].get<double>(), r["cache_bytes"].get<double>() / (1 << 20),
              r.value("device_bytes_peak_prefill", r["device_bytes_after_prefill"].get<double>()) / (1 << 20));
}

// One pass over contexts x policies with one way of filling the cache. A run whose estimate (the
// previous context's cost, scaled quadratically for a prefill, linearly for a synthetic fill) does
// not fit the time left is skipped and listed; a failing run is recorded and the next goes on.
void sweep(const Model& model, const Options& o, const jit::DeviceChoice& device, CacheFill fill, double start,
           nlohmann::json& runs, nlohmann::json& skipped) {
  const char* fill_name = fill == CacheFill::Synthetic ? "synthetic" : "prefill";
  std::printf("-- cache: %s\n", fill_name);
  // A synthetic row's first time column is the fill (host cache built and assigned), not a TTFT.
  std::printf("%8s %-10s %9s %9s %10s %10s %12s %12s\n", "context", "policy",
              fill == CacheFill::Synthetic ? "fill_s" : "ttft_s", "policy%", "dec_ms_p50", "dec_ms_p90", "cache_MiB",
              "dev_MiB");
  double last_cost = 0;
  int last_context = 0;
  for (int context : o.contexts) {
    if (context + o.decode_tokens > model.config.context_length) {
      skipped.push_back({{"context", context}, {"cache", fill_name}, {"why", "beyond the model's context"}});
      continue;
    }
    double full_ms = 0;
    for (const std::string& policy : o.policies) {
      const double scale = last_context > 0 ? static_cast<double>(context) / last_context : 1.0;
      const double estimate = last_cost * (fill == CacheFill::Prefill ? scale * scale : scale);
      const double left = o.time_limit - (now() - start);
      if (estimate > left) {
        skipped.push_back({{"context", context}, {"policy", policy}, {"cache", fill_name},
                           {"why", "estimated " + std::to_string(static_cast<int>(estimate)) + " s, " +
                                       std::to_string(static_cast<int>(left)) + " s left"}});
        std::printf("%8d %-10s skipped: estimated %.0f s, %.0f s left\n", context, policy.c_str(), estimate, left);
        std::fflush(stdout);
        continue;
      }
      nlohmann::json r;
      const double t0 = now();
      try {
        r = fill == CacheFill::Synthetic ? run_synthetic(model, o, device, context, policy)
                                         : run_one(model, o, device, context, policy);
      } catch (const std::exception& e) {  // e.g. out of device memory: recorded, the next run goes on
        skipped.push_back({{"context", context}, {"policy", policy}, {"cache", fill_name},
                           {"why", std::string("failed: ") + e.what()}});
        std::printf("%8d %-10s FAILED: %s\n", context, policy.c_str(), e.what());
        std::fflush(stdout);
        continue;
      }
      if (policy == "full") full_ms = r["decode_ms_median"].get<double>();
      if (full_ms > 0 && policy != "full") r["decode_speedup_vs_full"] = full_ms / r["decode_ms_median"].get<double>();
      print_row(r);
      std::fflush(stdout);
      last_cost = std::max(last_cost, now() - t0);
      runs.push_back(r);
    }
    last_context = context;
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  const double start = now();
  if (o.device != "cpu" && !cuda_decoder_built()) {
    std::printf("bench_gpu_decode: skipped: this build has no CUDA decoder (no CUDA toolkit at build time)\n");
    return 0;
  }
  jit::DeviceChoice device;
  try {
    device = jit::resolve_device(o.device);
  } catch (const std::exception& e) {
    std::printf("bench_gpu_decode: skipped: no usable device: %s\n", e.what());
    return 0;
  }
  std::printf("bench_gpu_decode: %s on %s, budget %s, %d decode tokens, time limit %.0f s\n", o.model.c_str(),
              device.describe().c_str(), o.budget.c_str(), o.decode_tokens, o.time_limit);
  const auto model = load_model(o.model);
  // Issue 10: weights go to the device without a full f32 host copy (host peak RSS <= ~1.2x the
  // weight file); the peak after the load and after every run is recorded to check it.
  const double rss_after_load = bench::peak_rss_mib();
  std::error_code size_error;
  const auto file_bytes = std::filesystem::file_size(o.model, size_error);
  std::printf("model loaded in %.1f s, host peak RSS %.0f MiB%s\n", now() - start, rss_after_load,
              size_error ? "" : (", weight file " + std::to_string(file_bytes >> 20) + " MiB").c_str());
  nlohmann::json runs = nlohmann::json::array(), skipped = nlohmann::json::array();
  for (CacheFill fill : o.fills) sweep(*model, o, device, fill, start, runs, skipped);
  for (const auto& r : runs)
    if (r.contains("decode_speedup_vs_full"))
      std::printf("speed-up %s at %d (%s cache): %.2fx per decoded token over the full cache\n",
                  r["policy"].get<std::string>().c_str(), r["context"].get<int>(),
                  r["cache"].get<std::string>().c_str(), r["decode_speedup_vs_full"].get<double>());
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    nlohmann::json doc{{"model", o.model},         {"device", device.describe()},
                       {"runs", runs},             {"skipped", skipped},
                       {"host_peak_rss_mib_after_load", rss_after_load},
                       {"host_peak_rss_mib_at_end", bench::peak_rss_mib()}};
    if (!size_error) doc["model_file_bytes"] = file_bytes;
    out << doc.dump(2) << "\n";
    if (!out) throw RuntimeError("bench_gpu_decode: cannot write " + o.json);
  }
  return 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_decode: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_decode: %s\n", e.what());
  return 1;
}
