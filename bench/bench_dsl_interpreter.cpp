// Interpreter throughput on CAKE's indicator (policies/cake.yaml `score`: mean + gamma * unbiased
// variance over a 32-query window, non-window keys only, average pooling kernel 5 with zero
// padding counted, GQA group mean) for 8 KV heads x 100K tokens, G = 4, single-threaded, against
// a hand-written C++ loop of the same formula. The 8 heads share one attention buffer (51 MB per
// head; far larger than any cache, so reuse does not flatter either side).
//   usage: bench_dsl_interpreter [T=100000] [repeats=3]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "dsl/policy_loader.h"

namespace {

constexpr int kHeads = 8, kG = 4, kW = 32, kKernel = 5;
constexpr float kGamma = 200.0f;

// The formula written out by hand: per query head, window mean and unbiased variance over the
// W rows (two passes, vectorised over tokens), mask the window keys, pool, average the group.
void cake_by_hand(const float* A, int T, float* out, std::vector<float>& s, std::vector<float>& v, std::vector<float>& ind) {
  std::fill(out, out + T, 0.0f);
  const int r = kKernel / 2;
  for (int h = 0; h < kG; ++h) {
    const float* a = A + static_cast<size_t>(h) * kW * T;
    std::fill(s.begin(), s.end(), 0.0f);
    std::fill(v.begin(), v.end(), 0.0f);
    for (int q = 0; q < kW; ++q)
      for (int t = 0; t < T; ++t) s[t] += a[static_cast<size_t>(q) * T + t];
    for (int t = 0; t < T; ++t) s[t] *= 1.0f / kW;
    for (int q = 0; q < kW; ++q)
      for (int t = 0; t < T; ++t) {
        const float d = a[static_cast<size_t>(q) * T + t] - s[t];
        v[t] += d * d;
      }
    for (int t = 0; t < T; ++t) ind[t] = t < T - kW ? s[t] + kGamma * (v[t] * (1.0f / (kW - 1))) : 0.0f;
    for (int t = 0; t < T; ++t) {
      float p = 0;
      for (int k = -r; k <= r; ++k)
        if (t + k >= 0 && t + k < T) p += ind[t + k];
      out[t] += p * (1.0f / kKernel) * (1.0f / kG);
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  omp_set_num_threads(1);
  std::vector<float> A(static_cast<size_t>(kG) * kW * T);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0f, 2.0f / T);
  for (auto& x : A) x = u(rng);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;

  auto policy = kvevict::load_policy("cake", {{"window", std::to_string(kW)}, {"gamma", "200"}, {"kernel", std::to_string(kKernel)}});
  kvevict::ScoreInputs in;
  in.n_layers = 1;
  in.n_kv_heads = kHeads;
  in.group = kG;
  in.T = T;
  in.prompt_len = T;
  in.W = kW;
  in.set_signal(kvevict::TensorSignal::WindowAttention, A.data());
  in.position = pos.data();

  std::vector<float> out_dsl(T), out_hand(T), s(T), v(T), ind(T);
  double best_dsl = 1e30, best_hand = 1e30;
  for (int rep = 0; rep < repeats; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (int head = 0; head < kHeads; ++head) {
      in.kv_head = head;
      policy->score(in, false, out_dsl.data());
    }
    best_dsl = std::min(best_dsl, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    for (int head = 0; head < kHeads; ++head) cake_by_hand(A.data(), T, out_hand.data(), s, v, ind);
    best_hand = std::min(best_hand, seconds_since(t0));
  }
  double max_rel = 0;
  for (int t = 0; t < T; ++t)
    max_rel = std::max(max_rel, std::fabs(static_cast<double>(out_dsl[t]) - out_hand[t]) / std::max(1e-12, std::fabs(static_cast<double>(out_hand[t]))));
  const double bytes = static_cast<double>(kHeads) * A.size() * sizeof(float);
  std::printf("CAKE indicator, %d KV heads x %d tokens, G=%d, W=%d, kernel %d, 1 thread, best of %d\n", kHeads, T, kG, kW, kKernel, repeats);
  std::printf("  interpreter : %8.2f ms  (%.2f GB/s of attention read)\n", best_dsl * 1e3, bytes / best_dsl / 1e9);
  std::printf("  hand-written: %8.2f ms  (%.2f GB/s)\n", best_hand * 1e3, bytes / best_hand / 1e9);
  std::printf("  ratio interpreter / hand-written: %.2fx   max relative difference %.2e\n", best_dsl / best_hand, max_rel);
  return max_rel < 1e-4 ? 0 : 1;
}
