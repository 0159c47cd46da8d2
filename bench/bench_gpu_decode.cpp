// bench_gpu_decode: issue 10's end-to-end GPU figures, one run per (context, policy):
//   - time to first token (the prefill with the policy scoring and evicting, through prefill_prompt
//     as generate and eval run it) and the policy's share of it (the engine's own clock during the
//     prefill; its decode-time work is engine_decode_s in the JSON);
//   - decode latency per token (median and p90 of --decode-tokens greedy steps, the policy's
//     decode triggers included);
//   - the KV cache bytes after the prefill and their peak during it (the engine's report: CAKE's
//     cascading bounds it), and the device memory in use (see "Device memory" below);
//   - each policy's decode speed-up over the full cache at the same context;
//   - prefill runs: where a decoded token's time goes (the line under the row, decode_breakdown_ms
//     in the JSON; decode_breakdown below): the engine's decode phases (EvictionReport::
//     decode_phases), the device mirror's host time and the rest of the step; and the prefill's
//     engine time by phase (engine_prefill_phases_s).
// The model: --model takes a synthetic spec (weights drawn in f32 in memory, no file) or a model
// file or folder; scripts/device-check.sh passes synthetic:llama3.1-8b written as an F16 Hugging
// Face folder (bench/write_synthetic_model.cpp), so the host peak RSS after the decoder is made can
// be set against the weight files' bytes (issue 10: at most about 1.2x; the "decoder made" line,
// host_peak_rss_over_weight_file in the JSON).
// Defaults: synthetic:llama3.1-8b (random weights of Llama-3.1-8B's geometry, 128K context),
// contexts 32768, 131072 and 4096 in that order (less the decode tokens, which must fit in the
// model's context): 32K first to measure what 128K is estimated from, 128K (the headline
// rows) before 4K (measured on the H200 already),
// policies full, cake and snapkv at 3% of the prompt, 16 decode tokens, scoring auto (the NVRTC-compiled kernels on a CUDA device).
//
// Every policy is loaded once before the runs (its kernels compiled into the kernel cache: the
// "policies loaded" line, "policies_s"), so no run's cost holds a compile.
// One decoder for the whole process: it is made once after the model is loaded (for an 8B model
// the weights' fp16 conversion and upload take tens of seconds: the `decoder made in` line and
// "decoder_s" in the JSON) and every run of both sweeps reuses it, reset first to an empty cache at
// position 0 (Decoder::reset, then an empty cache assigned so the host memory a large run left is
// released; the CUDA decoder's device mirror empties, or re-uploads, its device cache at the next
// flush). A run that would not fit --time-limit (counted from the start of the process) is skipped
// and listed, so a device check always ends in time: its estimate is the per-run cost alone (the
// model load and the decoder are paid once, before any run): the same policy's cost at the
// nearest measured context, scaled by the context ratio (RunCosts), and the first run of a sweep
// needs 30 s left. The JSON is rewritten after every run. Without a CUDA build or device it prints
// why and exits 0 (nothing measured).
//
// Device memory (cudaMemGetInfo's total - free: everything on the device, 0 on the CPU). The shared
// decoder keeps its activation buffers (they grow with the longest block and are never released),
// so a run's absolute figures include what earlier runs reserved there; its device KV arenas give
// their room back when an eviction or the reset empties most of a layer (DeviceKvLayout::
// layout_to_release), so the cache's share follows what the policy keeps.
//   "device_bytes_loaded" (JSON, once): right after the decoder was made: the weights, the
//     decoder's first buffers and the CUDA context;
//   per run, "device_bytes_at_start": after the reset, before the run (the figures below minus
//     this are what the run itself added);
//   prefill runs: "device_bytes_peak_prefill" (polled every 2 ms during the prefill: a sampled
//     peak), "device_bytes_after_prefill", "device_bytes_after_decode";
//   synthetic runs: "device_bytes_after_upload" (after the first decode step, which uploads the
//     assigned cache), "device_bytes_after_decode".
// Printed: dev_MiB is the prefill's peak (prefill) or the figure after the upload (synthetic);
// +dev_MiB is dev_MiB minus device_bytes_at_start (0 where earlier runs had reserved enough).
//   bench_gpu_decode [--model M] [--contexts 32768,4096] [--policies full,cake] [--budget 3%]
//                    [--decode-tokens N] [--time-limit SECONDS] [--json FILE] [--device cuda|cpu]
//                    [--cache synthetic,prefill] [--kv-path resident|packed] [--prefill-attention own|flashinfer]
// --prefill-attention: the CUDA decoder's prefill kernel (docs/CUDA.md "FlashInfer prefill"); by
// default FlashInfer's when the build has it (the prefill rows at 32K and 128K need it), else own.
// --kv-path packed runs the CUDA decoder's reference path (the host cache uploaded per layer and
// call, DeviceKvMode::PackedUpload): the "before" of the device-resident cache.
// --device cpu runs the same protocol on the CPU decoder (small contexts only: a check of the
// benchmark itself on a machine without a GPU).
//
// --cache synthetic,prefill (default: both, synthetic first). `prefill` is the protocol above.
// `synthetic` measures decode latency alone, without the prompt's prefill (whose fp32 attention
// takes minutes at 128K on today's kernels, docs/CUDA.md): the decoder's cache is filled with
// random K/V (the host cache is assigned; the device mirror uploads it at the first step) holding,
// per (layer, KV head), the whole context for `full` and budget x context entries for any other
// policy (a uniform stand-in for the policy's kept set, positions evenly spread over the context),
// then --decode-tokens greedy steps run without the engine. The K/V are deterministic (one
// splitmix64 stream per (layer, KV head, block of entries), drawn on all cores, whatever their
// number). Its rows say `cache: synthetic`: the same attention work per token as the policy's
// cache, not the policy's decode-time scoring.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "device_memory_peak.h"
#include "run_costs.h"
#include "synthetic_kv_cache.h"
#include "core/decode/sampler.h"
#include "core/decode/decoder.h"
#include "core/decode/make_decoder.h"
#include "core/engine/block_prefill.h"
#include "core/engine/engine.h"
#include "core/model/model.h"
#include "core/util/error.h"
#include "jit/device.h"
#include "jit/scoring_backend.h"
using namespace kvevict;
using bench::DeviceMemoryPeak;
using bench::RunCosts;
using bench::device_bytes_in_use;
using bench::synthetic_cache;

namespace {

enum class CacheFill { Synthetic, Prefill };

struct Options {
  std::string model = "synthetic:llama3.1-8b", budget = "3%", device = "cuda", json;
  std::vector<CacheFill> fills = {CacheFill::Synthetic, CacheFill::Prefill};
  DeviceKvMode kv_path = DeviceKvMode::Resident;  // --kv-path packed: the old per-call upload
  // --prefill-attention own|flashinfer; unset (auto): FlashInfer's when the build has it.
  std::optional<PrefillAttention> prefill_attention;
  std::vector<int> contexts = {32768, 131072, 4096};  // the order they run in (the header comment)
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
    else if (a == "--prefill-attention") o.prefill_attention = parse_prefill_attention(v, "bench_gpu_decode: " + a);
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

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// What every run shares: the options, the device and the one decoder of the process.
struct Bench {
  const Model& model;
  const Options& o;
  jit::DeviceChoice device;
  Decoder& decoder;
  // How a prefill's cost grows with the context (RunCosts): about r^1.5 with FlashInfer's
  // tensor-core attention (the GEMMs grow linearly, the attention quadratically, and at 32K-128K on
  // the 8B geometry they are of the same order), r^2 with the own f32 kernel (attention dominates).
  double prefill_exponent;
};

// An unestimated run (the first of a sweep) starts only with at least this much time left.
constexpr double kMinUnestimatedSeconds = 30;

// Back to an empty cache at position 0 before a run. reset() empties the cache and position (the
// CUDA decoder's mirror drops any host lag and empties the device cache at its next flush); the
// empty cache assigned after it also releases the host memory the last run left reserved (clear
// keeps capacities: 16 GiB after a 128K full cache).
void reset_decoder(Decoder& decoder) {
  decoder.reset();
  decoder.cache() = KVCache(decoder.model().config, decoder.cache().kv_type());
  decoder.set_position(0);
  (void)decoder.device_kv_bytes();  // flushes: the device cache is empty (its arenas given back) now
}

// EnginePhaseSeconds as {"signals": ..., "scoring": ..., ...} (mode_name keys), each phase's
// seconds times `scale` (1e3 / tokens: milliseconds per token).
nlohmann::json phases_json(const EnginePhaseSeconds& phases, double scale = 1.0) {
  nlohmann::json out = nlohmann::json::object();
  for (size_t i = 0; i < kNumEnginePhases; ++i) {
    const auto phase = static_cast<EnginePhase>(i);
    out[std::string(mode_name(phase))] = phases[phase] * scale;
  }
  return out;
}

// Where the decode steps of a prefill run went, in ms per decoded token (means over the steps):
// "step" (the whole forward call), the engine's decode phases (EvictionReport::decode_phases, one
// key per EnginePhase; all zero when the engine does not observe decode calls), the device
// mirror's host time during the steps ("mirror_sync_host", "mirror_flush": the compactions of the
// engine's keeps happen in the flush), the decoder's own host appends and observation downloads
// ("decoder_host_append", "decoder_observation": DeviceKvSeconds) and "rest": the step less all of
// these (the decoder's forward: kernel launches and the logits' download). Host wall times:
// asynchronous GPU work is charged to whichever call waits for it first (the first synchronous
// download of a layer waits for that layer's kernels).
nlohmann::json decode_breakdown(const std::vector<double>& steps, const EnginePhaseSeconds& engine,
                                const DeviceKvSeconds& mirror_before, const DeviceKvSeconds& mirror_after) {
  const double n = static_cast<double>(std::max<size_t>(1, steps.size())), to_ms = 1e3 / n;
  double step_seconds = 0;
  for (double s : steps) step_seconds += s;
  const double sync = mirror_after.sync_host - mirror_before.sync_host, flush = mirror_after.flush - mirror_before.flush;
  const double host_append = mirror_after.host_append - mirror_before.host_append;
  const double observation = mirror_after.observation - mirror_before.observation;
  nlohmann::json out = {{"step", step_seconds * to_ms}, {"engine", engine.total() * to_ms},
                        {"engine_phases", phases_json(engine, to_ms)}, {"mirror_sync_host", sync * to_ms},
                        {"mirror_flush", flush * to_ms}, {"decoder_host_append", host_append * to_ms},
                        {"decoder_observation", observation * to_ms}};
  out["rest"] = (step_seconds - engine.total() - sync - flush - host_append - observation) * to_ms;
  return out;
}

// One (context, policy) run of the prefill protocol on the shared decoder, reset first.
nlohmann::json run_one(const Bench& b, int context, const std::string& policy_name) {
  const Options& o = b.o;
  Decoder& decoder = b.decoder;
  std::vector<int> prompt(static_cast<size_t>(context));
  for (int i = 0; i < context; ++i) prompt[static_cast<size_t>(i)] = 32 + (i * 7919) % 95;  // printable bytes
  std::unique_ptr<PolicyProgram> program;
  std::unique_ptr<EvictionEngine> engine;
  if (policy_name != "full") {
    const auto backend = jit::resolve_scoring("auto", b.device, "--scoring");
    program = jit::load_scored_policy(policy_name, {}, {}, backend, b.device);
    engine = std::make_unique<EvictionEngine>(*program, b.model.config, EngineOptions{Budget::parse(o.budget), 0});
  }
  reset_decoder(decoder);
  const size_t mem_start = device_bytes_in_use(b.device);
  DeviceMemoryPeak prefill_peak(b.device);
  const double t0 = now();
  const std::vector<float>* logits = &prefill_prompt(decoder, prompt, engine.get(), engine.get());
  const double ttft = now() - t0;
  const size_t mem_peak = prefill_peak.stop();
  (void)decoder.device_kv_bytes();  // flushes: the prompt's last keeps are on the device (and their room given back)
  const size_t mem_prefill = device_bytes_in_use(b.device);
  const size_t cache_bytes = decoder.cache_layout().bytes_in_use();
  // What the host holds of the cache (position-only heads: 4 bytes per entry) and the rows that
  // crossed to the host during the prefill (docs/CUDA.md, "Position-only host heads").
  const size_t host_cache_prefill = decoder.cache_layout().bytes_reserved();
  const int64_t rows_read_prefill = decoder.device_kv_stats().counts.rows_read;
  // The engine's clock after the prefill: its share of the TTFT (its decode-time work comes later).
  const double engine_prefill_seconds = engine ? engine->report().seconds : 0.0;
  std::vector<double> steps;
  // As generate and eval decode: the engine observes decode calls only when its policy evicts then
  // (otherwise the device-resident cache is the only cache the decode loop touches).
  ForwardObserver* decode_observer = engine && engine->observes_decode() ? engine.get() : nullptr;
  const DeviceKvSeconds mirror_before = decoder.device_kv_stats().seconds;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const int next = argmax(*logits);
    const double s = now();
    logits = &decoder.forward(std::span<const int>(&next, 1), decode_observer);
    steps.push_back(now() - s);
  }
  const double engine_decode_seconds = engine ? engine->report().seconds - engine_prefill_seconds : 0.0;
  const EnginePhaseSeconds no_phases;
  const EvictionReport* report = engine ? &engine->report() : nullptr;
  return {{"context", context},
          {"policy", policy_name},
          {"cache", "prefill"},
          {"budget", engine ? o.budget : "100%"},
          {"ttft_s", ttft},
          {"engine_s", engine_prefill_seconds},
          {"policy_share_of_prefill", ttft > 0 ? engine_prefill_seconds / ttft : 0.0},
          {"engine_decode_s", engine_decode_seconds},
          {"engine_prefill_phases_s", phases_json(report ? report->prefill_phases : no_phases)},
          {"decode_breakdown_ms", decode_breakdown(steps, report ? report->decode_phases : no_phases, mirror_before,
                                                   decoder.device_kv_stats().seconds)},
          {"decode_ms_median", 1e3 * percentile(steps, 0.5)},
          {"decode_ms_p90", 1e3 * percentile(steps, 0.9)},
          {"cache_bytes", cache_bytes},
          {"device_bytes_at_start", mem_start},
          {"device_bytes_peak_prefill", mem_peak},
          {"device_bytes_after_prefill", mem_prefill},
          {"cache_bytes_peak_prefill", engine ? engine->report().peak_bytes : cache_bytes},
          {"device_bytes_after_decode", device_bytes_in_use(b.device)},
          {"host_cache_bytes_after_prefill", host_cache_prefill},
          {"host_cache_bytes_after_decode", decoder.cache_layout().bytes_reserved()},
          {"host_rows_read_prefill", rows_read_prefill},
          {"host_rows_read_total", decoder.device_kv_stats().counts.rows_read}};
}

// Decode latency over a synthetic cache (no prefill, no engine) on the shared decoder; see the
// header comment.
nlohmann::json run_synthetic(const Bench& b, int context, const std::string& policy_name) {
  const Options& o = b.o;
  Decoder& decoder = b.decoder;
  const int entries = policy_name == "full"
                          ? context
                          : std::max(1, static_cast<int>(std::lround(Budget::parse(o.budget).tokens_per_head(context))));
  reset_decoder(decoder);
  const size_t mem_start = device_bytes_in_use(b.device);
  const double t0 = now();
  decoder.cache() = synthetic_cache(b.model.config, decoder.cache().kv_type(), context, entries);
  decoder.set_position(context);
  const double fill = now() - t0;
  const size_t cache_bytes = decoder.cache_layout().bytes_in_use();
  std::vector<double> steps;
  size_t mem_uploaded = 0;
  int next = 32;
  for (int i = 0; i < o.decode_tokens; ++i) {
    const double s = now();
    next = argmax(decoder.forward(std::span<const int>(&next, 1)));
    steps.push_back(now() - s);
    if (i == 0) mem_uploaded = device_bytes_in_use(b.device);
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
          {"device_bytes_at_start", mem_start},
          {"device_bytes_after_upload", mem_uploaded},
          {"device_bytes_after_decode", device_bytes_in_use(b.device)}};
}

// A prefill row's decode_breakdown_ms on one line under it: where a decoded token's time went.
void print_breakdown(const nlohmann::json& r) {
  const nlohmann::json& b = r["decode_breakdown_ms"];
  std::string phases;
  for (size_t i = 0; i < kNumEnginePhases; ++i) {  // in EnginePhase order (a JSON object sorts its keys)
    const std::string name(mode_name(static_cast<EnginePhase>(i)));
    char value[32];
    std::snprintf(value, sizeof value, " %.2f", b["engine_phases"][name].get<double>());
    phases += (phases.empty() ? "" : ", ") + name + value;
  }
  std::printf("%8s %-10s decode ms/token: step %.2f = engine %.2f (%s) + mirror sync_host %.2f + flush %.2f + "
              "decoder host append %.2f + observation downloads %.2f + rest %.2f\n",
              "", "", b["step"].get<double>(), b["engine"].get<double>(), phases.c_str(),
              b["mirror_sync_host"].get<double>(), b["mirror_flush"].get<double>(),
              b["decoder_host_append"].get<double>(), b["decoder_observation"].get<double>(), b["rest"].get<double>());
}

void print_row(const nlohmann::json& r) {
  const bool synthetic = r.contains("fill_s");
  const double dev = synthetic ? r["device_bytes_after_upload"].get<double>() : r["device_bytes_peak_prefill"].get<double>();
  const double added = std::max(0.0, dev - r["device_bytes_at_start"].get<double>());
  std::printf("%8d %-10s %9.2f %8.2f%% %10.2f %10.2f %12.1f %12.1f %10.1f\n", r["context"].get<int>(),
              r["policy"].get<std::string>().c_str(), synthetic ? r["fill_s"].get<double>() : r["ttft_s"].get<double>(),
              100 * r["policy_share_of_prefill"].get<double>(), r["decode_ms_median"].get<double>(),
              r["decode_ms_p90"].get<double>(), r["cache_bytes"].get<double>() / (1 << 20), dev / (1 << 20),
              added / (1 << 20));
  if (r.contains("decode_breakdown_ms")) print_breakdown(r);
}

// One pass over contexts x policies with one way of filling the cache, on the shared decoder. A run
// whose estimated cost (RunCosts: per run, the decoder is made before any sweep) does not fit the
// time left is skipped and listed, and an unestimated one needs kMinUnestimatedSeconds; a failing
// run is recorded and the next goes on. `save` is called after every run or skip (the JSON is
// rewritten then, so a process stopped by its time limit keeps what it measured).
void sweep(const Bench& b, CacheFill fill, double start, nlohmann::json& runs, nlohmann::json& skipped,
           const std::function<void()>& save) {
  const Options& o = b.o;
  const char* fill_name = fill == CacheFill::Synthetic ? "synthetic" : "prefill";
  std::printf("-- cache: %s\n", fill_name);
  // A synthetic row's first time column is the fill (host cache built and assigned), not a TTFT.
  std::printf("%8s %-10s %9s %9s %10s %10s %12s %12s %10s\n", "context", "policy",
              fill == CacheFill::Synthetic ? "fill_s" : "ttft_s", "policy%", "dec_ms_p50", "dec_ms_p90", "cache_MiB",
              "dev_MiB", "+dev_MiB");
  std::fflush(stdout);
  RunCosts costs(fill == CacheFill::Prefill ? b.prefill_exponent : 1.0);
  for (int context : o.contexts) {
    // A context at the model's limit (128K) is cut by the decode steps, which must fit after it.
    if (context <= b.model.config.context_length && context + o.decode_tokens > b.model.config.context_length)
      context = b.model.config.context_length - o.decode_tokens;
    if (context < 1 || context + o.decode_tokens > b.model.config.context_length) {
      skipped.push_back({{"context", context}, {"cache", fill_name}, {"why", "beyond the model's context"}});
      std::printf("%8d %-10s skipped: beyond the model's context (%d)\n", context, "*", b.model.config.context_length);
      std::fflush(stdout);
      save();
      continue;
    }
    double full_ms = 0;
    for (const std::string& policy : o.policies) {
      const std::optional<double> estimated = costs.estimate(context, policy);
      const double estimate = estimated.value_or(kMinUnestimatedSeconds);
      const double left = o.time_limit - (now() - start);
      if (estimate > left) {
        skipped.push_back({{"context", context}, {"policy", policy}, {"cache", fill_name},
                           {"why", std::string(estimated ? "estimated " : "unestimated, needs ") +
                                       std::to_string(static_cast<int>(estimate)) + " s, " +
                                       std::to_string(static_cast<int>(left)) + " s left"}});
        std::printf("%8d %-10s skipped: %s %.0f s, %.0f s left\n", context, policy.c_str(),
                    estimated ? "estimated" : "unestimated, needs", estimate, left);
        std::fflush(stdout);
        save();
        continue;
      }
      nlohmann::json r;
      const double t0 = now();
      try {
        r = fill == CacheFill::Synthetic ? run_synthetic(b, context, policy) : run_one(b, context, policy);
      } catch (const std::exception& e) {  // e.g. out of device memory: recorded, the next run goes on
        skipped.push_back({{"context", context}, {"policy", policy}, {"cache", fill_name},
                           {"why", std::string("failed: ") + e.what()}});
        std::printf("%8d %-10s FAILED: %s\n", context, policy.c_str(), e.what());
        std::fflush(stdout);
        save();
        continue;
      }
      const double cost = now() - t0;
      r["run_s"] = cost;
      if (policy == "full") full_ms = r["decode_ms_median"].get<double>();
      if (full_ms > 0 && policy != "full") r["decode_speedup_vs_full"] = full_ms / r["decode_ms_median"].get<double>();
      print_row(r);
      std::fflush(stdout);
      costs.add(context, policy, cost);
      runs.push_back(r);
      save();
    }
  }
}

}  // namespace

int main(int argc, char** argv) try {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line out at once: a killed run keeps what it printed
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
  std::fflush(stdout);
  const auto model = load_model(o.model);
  const double load_seconds = now() - start;
  // Issue 10: weights go to the device without a full f32 host copy (host peak RSS <= ~1.2x the
  // weight file); the peak after the load, after the decoder is made and at the end is recorded.
  const double rss_after_load = bench::peak_rss_mib();
  const std::optional<uint64_t> file_bytes = bench::weight_file_bytes(o.model);
  std::printf("model loaded in %.1f s, host peak RSS %.0f MiB%s\n", load_seconds, rss_after_load,
              file_bytes ? (", weight file " + std::to_string(*file_bytes >> 20) + " MiB").c_str() : "");
  std::fflush(stdout);
  // The one decoder of the process (see the header comment): the weights converted and uploaded once.
  const double decoder_start = now();
  const bool on_cuda = device.kind == jit::DeviceKind::Cuda;
  const PrefillAttention prefill_attention = o.prefill_attention.value_or(
      on_cuda && flashinfer_prefill_built() && o.kv_path == DeviceKvMode::Resident ? PrefillAttention::FlashInfer
                                                                                 : PrefillAttention::Own);
  std::printf("prefill attention: %s\n", std::string(mode_name(prefill_attention)).c_str());
  const auto decoder = make_decoder(*model, on_cuda ? DecoderDevice::Cuda : DecoderDevice::Cpu,
                                    {.threads = 0, .device_ordinal = device.ordinal, .kv_type = KvType::F16,
                                     .device_kv = o.kv_path, .prefill_attention = prefill_attention});
  const double decoder_seconds = now() - decoder_start;
  const size_t mem_loaded = device_bytes_in_use(device);
  const double rss_after_decoder = bench::peak_rss_mib();
  // Issue 10's rule: at most about 1.2x the weight files (printed, and in the JSON).
  std::optional<double> rss_over_file;
  if (file_bytes) rss_over_file = rss_after_decoder * 1048576.0 / static_cast<double>(*file_bytes);
  char ratio[64] = "";
  if (rss_over_file) std::snprintf(ratio, sizeof ratio, " = %.2fx the weight file", *rss_over_file);
  std::printf("decoder made in %.1f s (once, reused by every run), device memory in use %.1f MiB, host peak RSS %.0f MiB%s\n",
              decoder_seconds, static_cast<double>(mem_loaded) / (1 << 20), rss_after_decoder, ratio);
  std::fflush(stdout);
  const Bench bench{*model, o, device, *decoder, prefill_attention == PrefillAttention::FlashInfer ? 1.5 : 2.0};
  // Each policy loaded once before any run, its kernels compiled by NVRTC into the kernel cache, so
  // a run's cost (which RunCosts scales to the next context) holds no compile: a later load is a
  // cache hit.
  const double policies_start = now();
  for (const std::string& policy : o.policies)
    if (policy != "full")
      (void)jit::load_scored_policy(policy, {}, {}, jit::resolve_scoring("auto", device, "--scoring"), device);
  const double policies_seconds = now() - policies_start;
  std::printf("policies loaded (their kernels compiled) in %.1f s\n", policies_seconds);
  std::fflush(stdout);
  nlohmann::json runs = nlohmann::json::array(), skipped = nlohmann::json::array();
  // The JSON, rewritten after every run (a temporary file renamed over it: a reader never sees half
  // of one), so a process stopped at its time limit leaves every run it finished. A failed write
  // is reported and the runs go on; the exit status says it (1).
  bool save_failed = false;
  const auto save = [&] {
    if (o.json.empty()) return;
    nlohmann::json doc{{"model", o.model},
                       {"device", device.describe()},
                       {"model_load_s", load_seconds},
                       {"decoder_s", decoder_seconds},
                       {"policies_s", policies_seconds},
                       {"prefill_attention", mode_name(prefill_attention)},
                       {"device_bytes_loaded", mem_loaded},
                       {"runs", runs},
                       {"skipped", skipped},
                       {"total_s", now() - start},
                       {"host_peak_rss_mib_after_load", rss_after_load},
                       {"host_peak_rss_mib_after_decoder", rss_after_decoder},
                       {"host_peak_rss_mib_at_end", bench::peak_rss_mib()}};
    if (file_bytes) {
      doc["model_file_bytes"] = *file_bytes;
      doc["host_peak_rss_over_weight_file"] = *rss_over_file;
    }
    const std::string partial = o.json + ".partial";
    std::ofstream out(partial);
    out << doc.dump(2) << "\n";
    out.close();
    std::error_code renamed;
    if (out) std::filesystem::rename(partial, o.json, renamed);
    if (!out || renamed) {
      std::fprintf(stderr, "bench_gpu_decode: cannot write %s%s%s\n", o.json.c_str(), renamed ? ": " : "",
                   renamed ? renamed.message().c_str() : "");
      save_failed = true;
    }
  };
  save();
  for (CacheFill fill : o.fills) sweep(bench, fill, start, runs, skipped, save);
  for (const auto& r : runs)
    if (r.contains("decode_speedup_vs_full"))
      std::printf("speed-up %s at %d (%s cache): %.2fx per decoded token over the full cache\n",
                  r["policy"].get<std::string>().c_str(), r["context"].get<int>(),
                  r["cache"].get<std::string>().c_str(), r["decode_speedup_vs_full"].get<double>());
  std::printf("total %.1f s (model load %.1f s, decoder %.1f s)\n", now() - start, load_seconds, decoder_seconds);
  save();
  return save_failed ? 1 : 0;
} catch (const UsageError& e) {
  std::fprintf(stderr, "bench_gpu_decode: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_decode: %s\n", e.what());
  return 1;
}
