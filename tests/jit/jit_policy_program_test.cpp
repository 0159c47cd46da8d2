// JitPolicyProgram on the host backend (and on the GPU when one is present): the kernel computes
// the scores, the reference program everything else.
#include "jit/jit_policy_program.h"

#include <gtest/gtest.h>

#include <cmath>

#include "jit/jit_compiler.h"
#include "jit/kernel_abi.h"
#include "jit/reference_kernels.h"
#include "jit_test_support.h"

namespace kvevict::jit {
namespace {

// A hand-written PolicyProgram with CAKE's indicator (prefill) and the same indicator with a
// 3-wide pooling as a distinct decode indicator.
class HandWrittenCake : public PolicyProgram {
 public:
  HandWrittenCake() {
    description_.name = "cake-handwritten";
    description_.window = 8;
    description_.has_layer_weight = true;
    description_.has_decode_score = true;
  }
  const PolicyDescription& description() const override { return description_; }
  void score(const ScoreInputs& in, bool decoding, float* out) const override {
    cake_indicator_reference(in, 200.0f, decoding ? 3 : 5, out);
  }
  double layer_weight(const LayerWeightInputs& in) const override { return 1.0 + in.layer; }

 private:
  PolicyDescription description_;
};

// The hand-written kernel text, with the entry points a generated kernel would have.
GeneratedKernel hand_written_kernel() {
  GeneratedKernel kernel;
  kernel.name = "cake-handwritten.cu";
  kernel.source = kernel_prelude() + cake_indicator_functions(200.0f, 5, "prefill") +
                  cake_indicator_functions(200.0f, 3, "decode") +
                  "KVEVICT_SCORE_ENTRY(kvevict_score, prefill_token)\n"
                  "KVEVICT_SCORE_ENTRY(kvevict_decode_score, decode_token)\n";
  kernel.entry_points = {kScoreEntry, kDecodeScoreEntry};
  kernel.score_signals[signal_index(TensorSignal::WindowAttention)] = true;  // all it reads
  kernel.decode_signals = kernel.score_signals;
  return kernel;
}

void expect_same_scores(const PolicyProgram& jit, const PolicyProgram& reference, float tolerance) {
  uint32_t seed = 5;
  for (int T : {1, 7, 300}) {
    testing::RandomScoreInputs random(4, 8, T, seed++);
    for (bool decoding : {false, true}) {
      std::vector<float> expected(T), actual(T);
      reference.score(random.inputs, decoding, expected.data());
      jit.score(random.inputs, decoding, actual.data());
      for (int t = 0; t < T; ++t)
        ASSERT_NEAR(actual[t], expected[t], tolerance * std::max(1e-6f, std::fabs(expected[t])))
            << "T=" << T << " t=" << t << (decoding ? " (decode)" : " (prefill)");
    }
  }
}

TEST(JitPolicyProgram, HostBackendMatchesTheReferenceForBothIndicators) {
  testing::TempDir dir;
  auto program = JitPolicyProgram::on_host(std::make_unique<HandWrittenCake>(), hand_written_kernel(), dir.path());
  HandWrittenCake reference;
  expect_same_scores(*program, reference, 1e-6f);
  EXPECT_EQ(program->description().name, "cake-handwritten");
  LayerWeightInputs weights;
  weights.layer = 3;
  EXPECT_EQ(program->layer_weight(weights), 4.0);
}

TEST(JitPolicyProgram, TheKernelCompilesWithNvrtc) {
  KVEVICT_REQUIRE_NVRTC();
  NvrtcRequest request;
  request.source = hand_written_kernel().source;
  request.arch = "sm_80";
  const NvrtcResult result = NvrtcLibrary::instance().compile(request);
  EXPECT_TRUE(result.ok) << result.log;
}

TEST(JitPolicyProgram, GpuBackendMatchesTheReference) {
  KVEVICT_GPU_TEST_SETUP(gpu);
  KernelCache& cache = gpu.cache;
  const CudaProbe& probe = gpu.probe;
  const GeneratedKernel kernel = hand_written_kernel();
  NvrtcRequest request;
  request.source = kernel.source;
  request.arch = probe.devices[0].arch();
  const JitKernel compiled = compile_cached(request, cache, kernel.name);
  auto program = JitPolicyProgram::on_gpu(std::make_unique<HandWrittenCake>(), kernel, *compiled.entry, 0);
  HandWrittenCake reference;
  expect_same_scores(*program, reference, 1e-5f);
}

TEST(JitPolicyProgram, MissingEntryPointIsAClearError) {
  testing::TempDir dir;
  GeneratedKernel kernel = hand_written_kernel();
  kernel.entry_points = {"something_else"};
  EXPECT_THROW(JitPolicyProgram::on_host(std::make_unique<HandWrittenCake>(), kernel, dir.path()), RuntimeError);
}

// A kernel is handed the signals its program reads and nothing else (kernel_abi.h, inputs_read_by):
// the others' slots null and their device marks cleared, the positions only to a reader of `pos`
// or random(); what it reads passes through untouched, in place or not.
TEST(JitPolicyProgram, AKernelIsHandedOnlyTheSignalsItReads) {
  testing::RandomScoreInputs random(2, 4, 9, 11);
  ScoreInputs in = random.inputs;
  in.set_device_signal(TensorSignal::CurrentAttention, random.other[signal_index(TensorSignal::CurrentAttention)].data());
  in.set_device_signal(TensorSignal::KeyNorm, random.key_norm.data());
  SignalSet reads{};
  reads[signal_index(TensorSignal::WindowAttention)] = true;
  reads[signal_index(TensorSignal::KeyNorm)] = true;
  const ScoreInputs handed = inputs_read_by(in, reads);
  for (const TensorSignalInfo& info : kTensorSignalTable) {
    const size_t s = signal_index(info.id);
    EXPECT_EQ(handed.tensor[s], reads[s] ? in.tensor[s] : nullptr) << signal_label(info.id);
  }
  EXPECT_EQ(handed.device_signals, 1u << signal_index(TensorSignal::KeyNorm)) << "only the read one's mark stays";
  EXPECT_EQ(handed.position, nullptr) << "positions nobody reads are not handed over";
  EXPECT_EQ(handed.T, in.T);
  EXPECT_EQ(handed.seed, in.seed);
  reads[signal_index(TensorSignal::Position)] = true;  // `pos` or random()
  EXPECT_EQ(inputs_read_by(in, reads).position, in.position);
}

}  // namespace
}  // namespace kvevict::jit
