// Generated kernels cannot address outside their buffers, whatever the policy computes (issue 13,
// deliver 7). The host build of each kernel (the very text NVRTC compiles) runs on buffers that
// end exactly at, or start exactly after, a PROT_NONE guard page: one element too far in either
// direction is a fault, in every build type (in the sanitizer build the kernels are compiled with
// ASan as well, which also covers the host entry's own scratch vector). Inputs are hostile: zero
// lengths (T = 0, W = 0, group = 0), W larger than T, windows of +-4096 offsets on a few tokens,
// signals the policy reads but the caller does not give (null), random programs of every
// construct. Each policy runs in a child process so that a fault names the case.
#ifdef KVEVICT_HAVE_LOWERED_FORM
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <tuple>

#include "jit/cuda_codegen.h"
#include "jit/host_module.h"
#include "jit/kernel_abi.h"
#include "jit_test_support.h"
#include "policy_generator.h"

namespace kvevict::jit {
namespace {

using HostEntry = void (*)(const KvScoreArgs*, float*);

// n elements against a guard page: `at_end` puts the last element right before a PROT_NONE page,
// otherwise the first element right after one. n = 0 gives a pointer into a guard page.
template <class T>
class GuardedBuffer {
 public:
  GuardedBuffer(size_t n, bool at_end) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t data_pages = (n * sizeof(T) + page - 1) / page;
    bytes_ = (data_pages + 2) * page;
    void* base = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) std::abort();
    base_ = static_cast<char*>(base);
    mprotect(base_, page, PROT_NONE);
    mprotect(base_ + (data_pages + 1) * page, page, PROT_NONE);
    char* first = at_end ? base_ + (data_pages + 1) * page - n * sizeof(T) : base_ + page;
    data_ = reinterpret_cast<T*>(first);
    n_ = n;
  }
  ~GuardedBuffer() { munmap(base_, bytes_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  T* data() { return data_; }
  size_t size() const { return n_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  T* data_ = nullptr;
  size_t n_ = 0;
};

struct Shape {
  int group, W, T;
};
// Zero lengths in each extent, W > T, single tokens, a long head.
constexpr Shape kShapes[] = {{1, 1, 1}, {2, 0, 5}, {1, 8, 0}, {0, 4, 5}, {0, 0, 0}, {2, 40, 3}, {4, 8, 67}, {1, 3, 9000}};

// Runs every entry of `kernel` on every shape, with buffers against guard pages at both ends and
// with every signal given or none; returns normally when nothing faulted. The output holds what the
// entry writes: T scores, or head_dim channel scores for the channel entry (kernel_abi.h).
// max_T: shapes with more tokens are skipped (token-pair kernels loop over s and t per token).
void run_everything(const GeneratedKernel& kernel, const std::string& dir, int max_T = 1 << 30) {
  HostModule module(kernel.source, dir, "bounds");
  for (const std::string& name : kernel.entry_points) {
    const auto entry = reinterpret_cast<HostEntry>(module.symbol(name));
    const KernelOutput output = name == kChannelScoreEntry ? KernelOutput::Channel : KernelOutput::Token;
    for (const Shape& s : kShapes)
      for (bool at_end : {true, false})
        for (bool given : {true, false}) {
          if (s.T > max_T) continue;
          std::fprintf(stderr, "case %s G=%d W=%d T=%d %s %s\n", name.c_str(), s.group, s.W, s.T,
                       at_end ? "guard-after" : "guard-before", given ? "signals" : "null-signals");
          const size_t T = size_t(s.T);
          std::vector<std::unique_ptr<GuardedBuffer<float>>> signals;  // one per row of the signal table
          for (const TensorSignalInfo& info : kTensorSignalTable)
            signals.push_back(std::make_unique<GuardedBuffer<float>>(
                size_t(signal_elements(info.id, s.group, s.W, 8, s.T)), at_end));
          KvScoreArgs extent_of{};
          extent_of.T = s.T;
          extent_of.head_dim = 8;
          GuardedBuffer<float> out(size_t(kernel_output_extent(extent_of, output)), at_end);
          GuardedBuffer<int> position(T, at_end);
          std::mt19937 rng(7);
          std::uniform_real_distribution<float> value(0.0f, 1.0f);
          for (auto& b : signals)
            for (size_t i = 0; i < b->size(); ++i) b->data()[i] = value(rng);
          for (size_t i = 0; i < T; ++i) position.data()[i] = int(i);
          KvScoreArgs args{};
          args.layer = 1;
          args.kv_head = 0;
          args.n_layers = 2;
          args.n_kv_heads = 1;
          args.group = s.group;
          args.head_dim = 8;
          args.T = s.T;
          args.prompt_len = s.T;
          args.decode_step = 1;
          args.W = s.W;
          for (int k = 0; k < kNumTensorSignals; ++k)
            args.tensor[k] = given && TensorSignal(k) != TensorSignal::Position ? signals[size_t(k)]->data() : nullptr;
          args.position = given ? position.data() : nullptr;
          args.seed = 3;
          entry(&args, out.data());
        }
  }
}

GeneratedKernel kernel_of(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string file = dir + "/" + name + ".yaml";
  std::ofstream(file) << text;
  return generate_policy_cuda(file, {}, {});
}

// Hand-written hostile programs: windows far wider than any head, in both directions, nested;
// reductions over every axis; normalise; positions and random() at every token.
std::vector<std::pair<std::string, std::string>> hostile_policies() {
  const std::string head = "about: hostile indices for the bounds test\nobserve: {window: 8}\n";
  return {
      {"wide_windows", head + "score: |\n"
                              "  score[t] = max(k in -4096 .. 4096: key_norm[t + k]) + sum(k in -4096 .. -4000: value_norm[t + k])\n"
                              "decode_score: |\n"
                              "  score[t] = min(k in 4000 .. 4096: sum(h: A_now[h, t + k]) + key_norm[t + k]) + mean(k in -3 .. 4096: pos[t + k])\n"},
      {"nested_windows", head + "score: |\n"
                                "  w[h, q, t] = sum(k in -4096 .. 4096: A[h, q, t + k])\n"
                                "  score[t] = max(k in -5 .. 5: sum(h, q: w[h, q, t + k])) + random[t]\n"},
      {"staged", head + "score: |\n"
                        "  n[h, q, t] = normalise(A[h, q, t] + 1)\n"
                        "  m[h, q] = max(t: n[h, q, t])\n"
                        "  spread = var(t: key_norm[t])\n"
                        "  score[t] = sum(h, q: n[h, q, t] * m[h, q]) + spread + entropy(h: A_acc[h, t])\n"},
  };
}

TEST(KernelBounds, HostilePoliciesAndShapesStayInsideTheirBuffers) {
  testing::TempDir dir;
  for (auto& [name, text] : hostile_policies()) {
    const GeneratedKernel kernel = kernel_of(dir.path(), name, "name: " + name + "\n" + text);
    EXPECT_EXIT(
        {
          run_everything(kernel, dir.path());
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), "")
        << name << "\n" << text;
  }
}

TEST(KernelBounds, RandomPoliciesOfEveryConstructStayInsideTheirBuffers) {
  testing::TempDir dir;
  // 12 policies without token pairs on every shape (a 9000-token head included), then 4 with them
  // (axes s and e, renamed reads) on the shapes up to 67 tokens.
  for (bool pairs : {false, true}) {
    testing::PolicyGenerator generator(20261201u, pairs);
    for (const auto& [name, text] : generator.table_files()) std::ofstream(dir.path() + "/" + name) << text;
    for (int i = 0; i < (pairs ? 4 : 12); ++i) {
      const std::string name = "random_" + std::to_string(i);
      const std::string text = generator.policy(name);
      const GeneratedKernel kernel = kernel_of(dir.path(), name, text);
      EXPECT_EXIT(
          {
            run_everything(kernel, dir.path(), pairs ? 67 : 1 << 30);
            std::exit(0);
          },
          ::testing::ExitedWithCode(0), "")
          << text;
    }
  }
}

// channel_score programs (the channel entry, one thread per key channel): ThinK and random ones.
TEST(KernelBounds, ChannelProgramsStayInsideTheirBuffers) {
  testing::TempDir dir;
  std::vector<GeneratedKernel> kernels = {generate_policy_cuda(std::string(KVEVICT_POLICY_DIR) + "/field/think.yaml", {}, {})};
  testing::PolicyGenerator generator(20261203u);
  for (const auto& [name, text] : generator.table_files()) std::ofstream(dir.path() + "/" + name) << text;
  for (int i = 0; i < 6; ++i) {
    const std::string name = "random_channels_" + std::to_string(i);
    kernels.push_back(kernel_of(dir.path(), name, generator.channel_policy(name)));
  }
  for (const GeneratedKernel& kernel : kernels) {
    ASSERT_EQ(kernel.entry_points.back(), kChannelScoreEntry) << kernel.policy_file;
    EXPECT_EXIT(
        {
          run_everything(kernel, dir.path());
          std::exit(0);
        },
        ::testing::ExitedWithCode(0), "")
        << kernel.policy_file;
  }
}

// The guard pages do catch a kernel that reads one element past its buffer (the harness can fail).
TEST(KernelBounds, TheGuardPagesCatchAnUnboundedRead) {
  testing::TempDir dir;
  GeneratedKernel kernel;
  kernel.source = kernel_prelude() +
                  "KVEVICT_FN float bad_token(const KvScoreArgs& a, int t) { return a.tensor[3][t + 1]; }\n"
                  "KVEVICT_SCORE_ENTRY(kvevict_score, bad_token)\n";
  kernel.entry_points = {"kvevict_score"};
  EXPECT_EXIT(
      {
        run_everything(kernel, dir.path());
        std::exit(0);
      },
      // A fault: SIGSEGV, or under ASan its report and abort.
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }, "guard-after");
}

}  // namespace
}  // namespace kvevict::jit
#endif
