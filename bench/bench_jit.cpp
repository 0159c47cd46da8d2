// bench_jit: JIT costs and kernel speed.
//   CPU-only parts (NVRTC needs no GPU):
//     - NVRTC cold compile time per kernel (median of fresh compiles, cache bypassed by a unique
//       comment so each compile really runs), for sm_80 and sm_90
//     - warm kernel-cache load: a new cache instance reading the entry from disk, and a memory hit
//     - the same generated and hand-written CAKE indicators compiled for the CPU (HostModule) and
//       timed there: a proxy of the generated code's per-element overhead (bound checks, index
//       arithmetic, passes over A) while no GPU is at hand; the target is the GPU ratio
//   GPU parts (skipped with the reason when no device is usable):
//     - the hand-written CAKE indicator kernel over 8 KV heads x T tokens (the baseline a generated
//       kernel must stay within 1.1x of)
//   (decode latency, full cache vs a 3% budget, is bench_gpu_decode's.)
// Usage: bench_jit [--repeats N]
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "jit/codegen.h"
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include "dsl/compiled_program.h"
#include "dsl/policy_file.h"
#include "dsl/policy_loader.h"
#include "dsl/program_builder.h"
#include "jit/cuda_codegen.h"
#endif
#include "jit/cuda_driver.h"
#include "jit/gpu_score_kernel.h"
#include "jit/jit_policy_program.h"
#include "jit/host_module.h"
#include "jit/kernel_abi.h"
#include "jit/jit_compiler.h"
#include "jit/reference_kernels.h"

using namespace kvevict;
using namespace kvevict::jit;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct KernelSource {
  std::string label, source;
};

#ifdef KVEVICT_HAVE_LOWERED_FORM
// CAKE's prefill indicator as the DSL lowers it (mean + gamma * var over q, mean-pooled over 5
// tokens, mean over the group), built directly so the benchmark does not depend on policy files.
dsl::LoweredProgram cake_lowered() {
  dsl::ProgramBuilder b(false);
  const int A = b.load(dsl::TensorSignal::WindowAttention);
  const int m = b.reduce(dsl::Reducer::Mean, dsl::kAxisQ, A);
  const int v = b.reduce(dsl::Reducer::Var, dsl::kAxisQ, A);
  const int i = b.binary(dsl::BinaryFn::Add, m, b.binary(dsl::BinaryFn::Mul, b.constant(200.0f), v));
  return b.finish(b.reduce(dsl::Reducer::Mean, dsl::kAxisH, b.window(dsl::Reducer::Mean, -2, 2, i)));
}
#endif

std::vector<KernelSource> kernels_to_measure() {
  std::vector<KernelSource> kernels;
  kernels.push_back({"cake indicator (hand-written)", cake_indicator_source(200.0f, 5)});
#ifdef KVEVICT_HAVE_LOWERED_FORM
  kernels.push_back({"cake indicator (generated)", generate_score_kernels("cake.cu", "cake", cake_lowered(), nullptr).source});
  std::vector<std::string> files;
  for (const auto& item : std::filesystem::directory_iterator(KVEVICT_POLICY_DIR))
    if (item.path().extension() == ".yaml") files.push_back(item.path().string());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
    kernels.push_back({"policy " + std::filesystem::path(file).stem().string(), kernel.source});
  }
#else
  std::printf("note: no code generator in this build (no DSL lowered form); per-policy figures pending\n");
#endif
  return kernels;
}

void bench_compile_and_cache(int repeats, const std::string& cache_dir) {
  const NvrtcLibrary& nvrtc = NvrtcLibrary::instance();
  std::printf("NVRTC %s (%s)\n", nvrtc.version_string().c_str(), nvrtc.path().c_str());
  const std::vector<KernelSource> kernels = kernels_to_measure();
  std::printf("%-32s %-7s %14s %14s %14s %10s\n", "kernel", "arch", "cold compile", "warm disk load", "memory hit",
              "cubin B");
  for (const auto& kernel : kernels) {
    for (const char* arch : {"sm_80", "sm_90"}) {
      std::vector<double> cold, disk, memory;
      size_t bytes = 0;
      NvrtcRequest request;
      request.name = "bench.cu";
      request.arch = arch;
      for (int r = 0; r < repeats; ++r) {
        // A unique comment defeats every cache, so NVRTC really runs (as on a first use).
        request.source = kernel.source + "\n// bench run " + std::to_string(r) + " " + std::to_string(now_ms()) + "\n";
        KernelCache::Options options;
        options.dir = cache_dir;
        KernelCache cache(options);
        double t0 = now_ms();
        const JitKernel compiled = compile_cached(request, cache, kernel.label);
        cold.push_back(now_ms() - t0);
        bytes = compiled.entry->payload.size();
        if (compiled.from_cache) throw RuntimeError("bench: cold compile unexpectedly hit the cache");
      }
      for (int r = 0; r < repeats * 10; ++r) {
        KernelCache::Options options;
        options.dir = cache_dir;
        KernelCache cache(options);  // empty memory: the entry comes from disk
        double t0 = now_ms();
        const JitKernel loaded = compile_cached(request, cache, kernel.label);
        disk.push_back(now_ms() - t0);
        if (!loaded.from_cache) throw RuntimeError("bench: warm load missed the cache");
        t0 = now_ms();
        compile_cached(request, cache, kernel.label);
        memory.push_back(now_ms() - t0);
      }
      std::printf("%-32s %-7s %11.1f ms %11.3f ms %11.4f ms %10zu\n", kernel.label.c_str(), arch, median(cold),
                  median(disk), median(memory), bytes);
    }
  }
}

// The indicator benchmarks' input: a G x W x T window attention, uniform in [0, 1/T) from a fixed
// seed, in `window`; the returned inputs point at it.
ScoreInputs indicator_inputs(int group, int W, int T, std::vector<float>& window) {
  window.assign(size_t(group) * W * T, 0.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0f, 1.0f / float(T));
  for (auto& v : window) v = u(rng);
  ScoreInputs in;
  in.group = group;
  in.W = W;
  in.T = T;
  in.set_signal(TensorSignal::WindowAttention, window.data());
  return in;
}

#ifdef KVEVICT_HAVE_LOWERED_FORM
// Median milliseconds of one call of a host-compiled score entry over `in`, for each of 8 KV heads.
double host_layer_ms(void (*entry)(const KvScoreArgs*, float*), const KvScoreArgs& args, float* out, int repeats) {
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = now_ms();
    for (int head = 0; head < 8; ++head) entry(&args, out);
    times.push_back(now_ms() - t0);
  }
  return median(times);
}

void bench_host_indicator(int repeats, const std::string& work_dir) {
  using Entry = void (*)(const KvScoreArgs*, float*);
  HostModule hand(cake_indicator_source(200.0f, 5), work_dir, "cake_hand");
  HostModule generated(generate_score_kernels("cake.cu", "cake", cake_lowered(), nullptr).source, work_dir, "cake_gen");
  const Entry hand_entry = reinterpret_cast<Entry>(hand.symbol(kCakeIndicatorEntry));
  const Entry generated_entry = reinterpret_cast<Entry>(generated.symbol("kvevict_score"));
  const int group = 4, W = 32, T = 32768;
  std::vector<float> window;
  const KvScoreArgs args = to_kernel_args(indicator_inputs(group, W, T, window));
  std::vector<float> hand_out(T), generated_out(T);
  const double hand_ms = host_layer_ms(hand_entry, args, hand_out.data(), repeats);
  const double generated_ms = host_layer_ms(generated_entry, args, generated_out.data(), repeats);
  float worst = 0;
  for (int t = 0; t < T; ++t) worst = std::max(worst, std::fabs(generated_out[t] - hand_out[t]));
  std::printf("host-compiled CAKE indicator (%s), 8 KV heads x G=%d x W=%d x T=%d: hand-written %.1f ms, generated "
              "%.1f ms per layer = %.2fx (a CPU proxy; the target is the GPU ratio); max |difference| %.3g\n",
              host_compiler().c_str(), group, W, T, hand_ms, generated_ms, generated_ms / hand_ms, worst);
}
#endif

#ifdef KVEVICT_HAVE_LOWERED_FORM
// CAKE's layer preference (its layer_weight program, policies/cake.yaml) for one layer of 8 KV
// heads x G=4 x W=32 x T tokens: the interpreter (the CPU path before the generated layer kernel),
// the generated kernel built for the host, and on a GPU the generated kernel reading the window
// attention in place (as the engine hands it, no upload): the prefill's policy share.
struct CakeLayer {
  std::vector<std::vector<float>> window;  // per KV head, [G][W][T]
  LayerWeightInputs inputs;
  CakeLayer(int T, int kv_heads = 8) : window(size_t(kv_heads)) {
    for (int g = 0; g < kv_heads; ++g) {
      ScoreInputs in = indicator_inputs(4, 32, T, window[size_t(g)]);
      in.kv_head = g;
      in.n_kv_heads = kv_heads;
      in.layer = 3;
      in.n_layers = 32;
      in.head_dim = 128;
      in.prompt_len = T;
      inputs.heads.push_back(in);
    }
    inputs.layer = 3;
    inputs.n_layers = 32;
    inputs.prompt_len = T;
    inputs.budget = 0.03 * T;
  }
};

std::string cake_policy_file() { return resolve_policy_path("cake", {}); }

void bench_host_layer_weight(int repeats, const std::string& work_dir) {
  const std::string file = cake_policy_file();
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  auto generated = JitPolicyProgram::on_host(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)),
                                             generate_policy_cuda(file, {}, {}), work_dir);
  for (int T : {4096, 32768}) {
    CakeLayer layer(T);
    double expected = 0, actual = 0;
    std::vector<double> interp_ms, host_ms;
    for (int r = 0; r < std::min(repeats, 3); ++r) {
      double t0 = now_ms();
      expected = interpreted.layer_weight(layer.inputs);
      interp_ms.push_back(now_ms() - t0);
      t0 = now_ms();
      actual = generated->layer_weight(layer.inputs);
      host_ms.push_back(now_ms() - t0);
    }
    std::printf("CAKE layer preference, 8 KV heads x G=4 x W=32 x T=%d: interpreter %.1f ms, generated (host build) "
                "%.1f ms per layer; relative difference %.2g\n",
                T, median(interp_ms), median(host_ms), std::fabs(actual - expected) / std::max(1e-30, std::fabs(expected)));
  }
}

void bench_gpu_layer_weight(int ordinal) {
  const CudaProbe probe = CudaDriver::probe();
  const std::string file = cake_policy_file();
  const GeneratedKernel kernel = generate_policy_cuda(file, {}, {});
  KernelCache cache;
  NvrtcRequest request;
  request.name = kernel.name;
  request.source = kernel.source;
  request.arch = probe.devices[size_t(ordinal)].arch();
  const JitKernel compiled = compile_cached(request, cache, "cake-layer-weight");
  auto program = JitPolicyProgram::on_gpu(std::make_unique<dsl::InterpretedPolicy>(dsl::compile_policy_file(file)), kernel,
                                          *compiled.entry, ordinal);
  dsl::InterpretedPolicy interpreted(dsl::compile_policy_file(file));
  for (int T : {32768, 131072}) {
    CakeLayer layer(T);
    const double expected = T <= 32768 ? interpreted.layer_weight(layer.inputs) : 0.0;
    std::vector<DeviceBuffer> on_device;  // each head's A on the device, handed in place
    LayerWeightInputs in = layer.inputs;
    for (size_t g = 0; g < layer.window.size(); ++g) {
      on_device.emplace_back(layer.window[g].size() * sizeof(float));
      on_device.back().upload(layer.window[g].data(), layer.window[g].size() * sizeof(float));
      in.heads[g].set_device_signal(TensorSignal::WindowAttention, reinterpret_cast<const float*>(on_device.back().address()));
    }
    double value = program->layer_weight(in);  // warm-up
    std::vector<double> ms;
    for (int r = 0; r < 20; ++r) {
      const double t0 = now_ms();
      value = program->layer_weight(in);
      ms.push_back(now_ms() - t0);
    }
    std::printf("CAKE layer preference on the GPU (generated, A read in place), T=%d: %.3f ms per layer (wall, launches "
                "and the one-float download included)%s\n",
                T, median(ms),
                expected > 0 ? (", relative difference to the interpreter " +
                                std::to_string(std::fabs(value - expected) / std::fabs(expected))).c_str()
                             : "");
  }
}
#endif

void bench_gpu_indicator() {
  const CudaProbe probe = CudaDriver::probe();
  if (!probe.usable) {
    std::printf("GPU indicator: skipped (no usable CUDA device: %s)\n", probe.reason.c_str());
    return;
  }
  use_cuda_device(0);
  const CudaDeviceInfo info = probe.devices[0];
  std::printf("GPU: %s (%s)\n", info.name.c_str(), info.arch().c_str());
  KernelCache cache;
  NvrtcRequest request;
  request.name = "cake_indicator.cu";
  request.source = cake_indicator_source(200.0f, 5);
  request.arch = info.arch();
  const JitKernel compiled = compile_cached(request, cache, "cake-handwritten");
  {
    // Warm start on a GPU: entry read from the disk cache by a fresh cache instance, then loaded
    // into the driver (cuModuleLoadData) and the kernel looked up.
    std::vector<double> load;
    for (int r = 0; r < 20; ++r) {
      KernelCache fresh;
      const double t0 = now_ms();
      const JitKernel loaded = compile_cached(request, fresh, "cake-handwritten");
      CudaModule module(loaded.entry->payload.data(), loaded.entry->payload.size());
      module.function(kCakeIndicatorEntry);
      load.push_back(now_ms() - t0);
    }
    std::printf("warm load on the GPU (disk cache + cuModuleLoadData + lookup): %.3f ms median\n", median(load));
  }
  GpuScoreKernel kernel(*compiled.entry, kCakeIndicatorEntry);
#ifdef KVEVICT_HAVE_LOWERED_FORM
  NvrtcRequest generated_request = request;
  generated_request.name = "cake.cu";
  generated_request.source = generate_score_kernels("cake.cu", "cake", cake_lowered(), nullptr).source;
  const JitKernel generated_compiled = compile_cached(generated_request, cache, "cake-generated");
  GpuScoreKernel generated(*generated_compiled.entry, "kvevict_score");
#endif
  const int group = 4, W = 32, kv_heads = 8;
  for (int T : {32768, 131072}) {
    std::vector<float> window;
    const ScoreInputs in = indicator_inputs(group, W, T, window);
    std::vector<float> out(T);
    kernel.score(in, out.data());  // uploads the inputs once; warms up
    DeviceTimer timer;
    const int iterations = 50;
    timer.start();
    for (int i = 0; i < iterations * kv_heads; ++i) kernel.launch_again();
    const float ms = timer.stop_ms() / float(iterations);
    const double bytes = double(kv_heads) * group * W * T * 4.0;
    std::printf("hand-written CAKE indicator, %d KV heads x G=%d x W=%d x T=%d: %.3f ms per layer (%.0f GB/s of window "
                "attention read)\n",
                kv_heads, group, W, T, ms, bytes / (ms * 1e6));
#ifdef KVEVICT_HAVE_LOWERED_FORM
    std::vector<float> generated_out(T);
    generated.score(in, generated_out.data());
    float worst = 0;
    for (int t = 0; t < T; ++t) worst = std::max(worst, std::fabs(generated_out[t] - out[t]));
    timer.start();
    for (int i = 0; i < iterations * kv_heads; ++i) generated.launch_again();
    const float generated_ms = timer.stop_ms() / float(iterations);
    std::printf("generated CAKE indicator, same shape: %.3f ms per layer = %.2fx the hand-written kernel (target <= 1.1x); "
                "max |difference| %.3g\n",
                generated_ms, generated_ms / ms, worst);
#endif
  }
#ifndef KVEVICT_HAVE_LOWERED_FORM
  std::printf("JIT indicator vs hand-written: skipped (the code generator is not built: no DSL lowered form)\n");
#else
  bench_gpu_layer_weight(0);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
  }
  try {
    const std::string cache_dir =
        (std::filesystem::temp_directory_path() / ("kvevict-bench-jit-" + std::to_string(::getpid()))).string();
    // The GPU figures first: the device check gives this benchmark a fixed slice, and the NVRTC
    // compile table (about 20 s of cold compiles) and the host proxies below matter less.
    bench_gpu_indicator();
    std::string why;
    if (NvrtcLibrary::available(&why)) {
      bench_compile_and_cache(repeats, cache_dir);
    } else {
      std::printf("NVRTC: skipped (%s)\n", why.c_str());
    }
#ifdef KVEVICT_HAVE_LOWERED_FORM
    bench_host_indicator(repeats, cache_dir + "-host");
    bench_host_layer_weight(repeats, cache_dir + "-host");
#endif
    std::error_code ec;
    std::filesystem::remove_all(cache_dir, ec);
    std::filesystem::remove_all(cache_dir + "-host", ec);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_jit: %s\n", e.what());
    return e.exit_code();
  }
  return 0;
}
