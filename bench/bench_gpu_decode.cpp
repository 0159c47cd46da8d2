// bench_gpu_decode: issue 10's end-to-end GPU figures, one run per (context, policy):
//   - time to first token (the prefill with the policy scoring and evicting, through prefill_prompt
//     as generate and eval run it) and the policy's share of it (the engine's own clock);
//   - decode latency per token (median and p90 of --decode-tokens greedy steps, the policy's
//     decode triggers included);
//   - the KV cache bytes after the prefill, and the device memory in use (total - free, sampled
//     after load, after the prefill and after decoding: sampled, not a true peak);
//   - each policy's decode speed-up over the full cache at the same context.
// Defaults: synthetic:llama3.1-8b (random weights of Llama-3.1-8B's geometry, 128K context),
// contexts 4096, 32768 and 131072, policies full, cake and snapkv at 3% of the prompt, 16 decode
// tokens, scoring auto (the NVRTC-compiled kernels on a CUDA device). A run that would not fit --time-limit (estimated from
// the previous context's prefill, scaled quadratically) is skipped and listed, so a device check
// always ends in time. Without a CUDA build or device it prints why and exits 0 (nothing measured).
//   bench_gpu_decode [--model M] [--contexts 4096,32768] [--policies full,cake] [--budget 3%]
//                    [--decode-tokens N] [--time-limit SECONDS] [--json FILE] [--device cuda|cpu]
// --device cpu runs the same protocol on the CPU decoder (small contexts only: a check of the
// benchmark itself on a machine without a GPU).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

struct Options {
  std::string model = "synthetic:llama3.1-8b", budget = "3%", device = "cuda", json;
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
    else if (a == "--contexts") o.contexts = split<int>(v, [](const std::string& s) { return std::stoi(s); });
    else if (a == "--policies") o.policies = split<std::string>(v, [](const std::string& s) { return s; });
    else if (a == "--budget") o.budget = v;
    else if (a == "--decode-tokens") o.decode_tokens = std::max(1, std::stoi(v));
    else if (a == "--time-limit") o.time_limit = std::stod(v);
    else if (a == "--json") o.json = v;
    else if (a == "--device") o.device = v;
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
                              {.device_ordinal = device.ordinal});
  const size_t mem_loaded = device_bytes_in_use(device);
  const double t0 = now();
  const std::vector<float>* logits = &prefill_prompt(*decoder, prompt, engine.get(), engine.get());
  const double ttft = now() - t0;
  const size_t mem_prefill = device_bytes_in_use(device);
  const size_t cache_bytes = decoder->cache().bytes_in_use();
  std::vector<double> steps;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const int next = argmax(*logits);
    const double s = now();
    logits = &decoder->forward(std::span<const int>(&next, 1), engine.get());
    steps.push_back(now() - s);
  }
  const double engine_seconds = engine ? engine->report().seconds : 0.0;
  return {{"context", context},
          {"policy", policy_name},
          {"budget", engine ? o.budget : "100%"},
          {"ttft_s", ttft},
          {"engine_s", engine_seconds},
          {"policy_share_of_prefill", ttft > 0 ? engine_seconds / ttft : 0.0},
          {"decode_ms_median", 1e3 * percentile(steps, 0.5)},
          {"decode_ms_p90", 1e3 * percentile(steps, 0.9)},
          {"cache_bytes", cache_bytes},
          {"device_bytes_loaded", mem_loaded},
          {"device_bytes_after_prefill", mem_prefill},
          {"device_bytes_after_decode", device_bytes_in_use(device)}};
}

void print_row(const nlohmann::json& r) {
  std::printf("%8d %-10s %9.2f %8.2f%% %10.2f %10.2f %12.1f %12.1f\n", r["context"].get<int>(),
              r["policy"].get<std::string>().c_str(), r["ttft_s"].get<double>(),
              100 * r["policy_share_of_prefill"].get<double>(), r["decode_ms_median"].get<double>(),
              r["decode_ms_p90"].get<double>(), r["cache_bytes"].get<double>() / (1 << 20),
              r["device_bytes_after_prefill"].get<double>() / (1 << 20));
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
  std::printf("model loaded in %.1f s\n", now() - start);
  std::printf("%8s %-10s %9s %9s %10s %10s %12s %12s\n", "context", "policy", "ttft_s", "policy%", "dec_ms_p50",
              "dec_ms_p90", "cache_MiB", "dev_MiB");
  nlohmann::json runs = nlohmann::json::array(), skipped = nlohmann::json::array();
  double last_prefill = 0;
  int last_context = 0;
  for (int context : o.contexts) {
    if (context + o.decode_tokens > model->config.context_length) {
      skipped.push_back({{"context", context}, {"why", "beyond the model's context"}});
      continue;
    }
    double full_ms = 0;
    for (const std::string& policy : o.policies) {
      const double scale = last_context > 0 ? static_cast<double>(context) / last_context : 1.0;
      const double estimate = last_prefill * scale * scale;  // attention dominates at long contexts
      const double left = o.time_limit - (now() - start);
      if (estimate > left) {
        skipped.push_back({{"context", context}, {"policy", policy},
                           {"why", "estimated " + std::to_string(static_cast<int>(estimate)) + " s, " +
                                       std::to_string(static_cast<int>(left)) + " s left"}});
        std::printf("%8d %-10s skipped: estimated %.0f s, %.0f s left\n", context, policy.c_str(), estimate, left);
        std::fflush(stdout);
        continue;
      }
      nlohmann::json r;
      try {
        r = run_one(*model, o, device, context, policy);
      } catch (const std::exception& e) {  // e.g. out of device memory: recorded, the next run goes on
        skipped.push_back({{"context", context}, {"policy", policy}, {"why", std::string("failed: ") + e.what()}});
        std::printf("%8d %-10s FAILED: %s\n", context, policy.c_str(), e.what());
        std::fflush(stdout);
        continue;
      }
      if (policy == "full") full_ms = r["decode_ms_median"].get<double>();
      if (full_ms > 0 && policy != "full") r["decode_speedup_vs_full"] = full_ms / r["decode_ms_median"].get<double>();
      print_row(r);
      std::fflush(stdout);
      last_prefill = std::max(last_prefill, r["ttft_s"].get<double>());
      runs.push_back(r);
    }
    last_context = context;
  }
  for (const auto& r : runs)
    if (r.contains("decode_speedup_vs_full"))
      std::printf("speed-up %s at %d: %.2fx per decoded token over the full cache\n",
                  r["policy"].get<std::string>().c_str(), r["context"].get<int>(), r["decode_speedup_vs_full"].get<double>());
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << nlohmann::json{{"model", o.model}, {"device", device.describe()}, {"runs", runs}, {"skipped", skipped}}.dump(2)
        << "\n";
    if (!out) throw RuntimeError("bench_gpu_decode: cannot write " + o.json);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_decode: %s\n", e.what());
  return 1;
}
