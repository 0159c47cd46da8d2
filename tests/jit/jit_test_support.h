#pragma once
// Helpers shared by the JIT tests: a temporary directory, a scoped environment variable, random
// window-attention inputs and the NVRTC skip check.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/engine/policy_program.h"
#include "jit/codegen.h"
#include "jit/cuda_driver.h"
#include "jit/jit_compiler.h"
#include "jit/kernel_cache.h"
#include "jit/nvrtc_library.h"

namespace kvevict::jit::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kvevict-jit-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Random softmax rows shaped like window attention [G][W][T], plus norms and positions (with gaps,
// as after evictions, so a kernel that took the slot for a position shows), and a
// random positive buffer for every other signal of the table (core/engine/signals.h), so a new
// signal is exercised by every test that uses these inputs.
struct RandomScoreInputs {
  std::vector<float> window_attention, key_norm, value_norm;
  std::array<std::vector<float>, kNumTensorSignals> other;
  std::vector<int32_t> position;
  ScoreInputs inputs;

  RandomScoreInputs(int group, int W, int T, uint32_t seed) {
    std::mt19937 rng(seed);
    std::exponential_distribution<float> logits(1.0f);
    window_attention.resize(size_t(group) * W * T);
    for (int row = 0; row < group * W; ++row) {
      float sum = 0;
      for (int t = 0; t < T; ++t) {
        // Heavy-tailed values so some tokens stand out, as in real attention.
        const float v = std::exp(3.0f * logits(rng));
        window_attention[size_t(row) * T + t] = v;
        sum += v;
      }
      for (int t = 0; t < T; ++t) window_attention[size_t(row) * T + t] /= sum;
    }
    std::uniform_real_distribution<float> norm(0.5f, 4.0f);
    for (int t = 0; t < T; ++t) {
      key_norm.push_back(norm(rng));
      value_norm.push_back(norm(rng));
      position.push_back(t + t / 2 + 1);  // a cache that has evicted: positions unlike the slots
    }
    inputs.n_layers = 4;
    inputs.n_kv_heads = 2;
    inputs.group = group;
    inputs.head_dim = 64;
    inputs.n_embd = 24;  // the model axis c (hidden[c, t]): a size unlike head_dim, so a mixed-up extent shows
    inputs.T = T;
    inputs.prompt_len = T;
    inputs.W = W;
    inputs.set_signal(TensorSignal::WindowAttention, window_attention.data());
    inputs.set_signal(TensorSignal::KeyNorm, key_norm.data());
    inputs.set_signal(TensorSignal::ValueNorm, value_norm.data());
    inputs.position = position.data();
    inputs.seed = seed;
    for (const TensorSignalInfo& info : kTensorSignalTable) {
      if (info.id == TensorSignal::Position || inputs.signal(info.id)) continue;
      std::vector<float>& buffer = other[signal_index(info.id)];
      buffer.resize(size_t(signal_elements(info.id, group, W, inputs.head_dim, T, inputs.n_embd)));
      for (float& x : buffer) x = norm(rng);
      inputs.set_signal(info.id, buffer.data());
    }
  }
};

#define KVEVICT_REQUIRE_NVRTC()                                                     \
  do {                                                                              \
    std::string why_;                                                               \
    if (!::kvevict::jit::NvrtcLibrary::available(&why_)) GTEST_SKIP() << "NVRTC is not available: " << why_; \
  } while (0)

// What a GPU test needs: the device probe (its architecture) and a kernel cache in a temporary
// directory of its own. KVEVICT_GPU_TEST_SETUP(name) declares one and skips the test, naming the
// reason, without a usable CUDA device or without NVRTC.
struct GpuTestSetup {
  CudaProbe probe = CudaDriver::probe();
  TempDir dir;
  KernelCache cache{cache_options(dir)};

  // `kernel` compiled by NVRTC for device 0's architecture, through the cache.
  JitKernel compile(const GeneratedKernel& kernel, const std::string& label) {
    NvrtcRequest request;
    request.name = kernel.name;
    request.source = kernel.source;
    request.arch = probe.devices[0].arch();
    return compile_cached(request, cache, label);
  }

 private:
  static KernelCache::Options cache_options(const TempDir& d) {
    KernelCache::Options o;
    o.dir = d.path();
    return o;
  }
};

#define KVEVICT_GPU_TEST_SETUP(name)                                                          \
  ::kvevict::jit::testing::GpuTestSetup name;                                                 \
  if (!name.probe.usable) GTEST_SKIP() << "no usable CUDA device: " << name.probe.reason;    \
  KVEVICT_REQUIRE_NVRTC()

}  // namespace kvevict::jit::testing
