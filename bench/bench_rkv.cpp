// R-KV's score (policies/field/rkv.yaml) through the interpreter against a hand-written C++ loop
// of the same formula, on one KV head of SmolLM2's shape (G = 3 query heads, W = 8 window rows,
// head_dim 64) at T tokens, single-threaded. The keys fall in `clusters` groups (token t in group
// t % clusters, cosine about 0.8 inside a group, about 0 across), so each row's last partner above
// R-KV's 0.5 is within the newest `clusters` tokens, as on SmolLM2's keys (about 70 tokens from
// the end on average, docs/PERFORMANCE.md): the scan's early exit is exercised, not defeated.
// The difference is printed (float sums in another order), not asserted: bench/ measures.
//   usage: bench_rkv [T=4096] [clusters=64] [repeats=3]
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

constexpr int kG = 3, kW = 8, kD = 64, kKernel = 7;
constexpr float kLambda = 0.07f, kThreshold = 0.5f;

struct Head {
  int T;
  std::vector<float> A, K, norm;  // A [h][q][t], K [d][t], norm [t]
};

Head make_head(int T, int clusters, uint32_t seed) {
  Head h{T, std::vector<float>(size_t(kG) * kW * T), std::vector<float>(size_t(kD) * T), std::vector<float>(T)};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> centre(size_t(clusters) * kD);
  for (auto& c : centre) c = n(rng);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < kD; ++d) h.K[size_t(d) * T + t] = centre[size_t(t % clusters) * kD + d] + 0.5f * n(rng);
  for (int t = 0; t < T; ++t) {
    double s = 0;
    for (int d = 0; d < kD; ++d) s += double(h.K[size_t(d) * T + t]) * h.K[size_t(d) * T + t];
    h.norm[t] = float(std::sqrt(s));
  }
  std::uniform_real_distribution<float> u(0.0f, 2.0f / T);
  for (auto& a : h.A) a = u(rng);
  return h;
}

// The file's formula, written out: importance (window softmax renormalised over the non-window
// keys, mean over the rows, max over the group, max-pooled) and redundancy (each key's mean cosine
// to the others, each row's last partner above the threshold dropped, softmax over the keys).
void rkv_by_hand(const Head& h, float* out, std::vector<float>& u, std::vector<float>& work) {
  const int T = h.T, nw = T - kW, r = kKernel / 2;
  work.assign(size_t(3) * T, 0.0f);
  float* pooled = work.data();
  float* others = pooled + T;
  float* dropped = others + T;
  // p[h, t] = mean over q of A / n, then the group's max: one head at a time.
  std::vector<float> p(T);
  std::fill(pooled, pooled + T, -INFINITY);
  for (int g = 0; g < kG; ++g) {
    std::fill(p.begin(), p.end(), 0.0f);
    for (int q = 0; q < kW; ++q) {
      const float* a = h.A.data() + (size_t(g) * kW + q) * T;
      double n = 0;
      for (int t = 0; t < nw; ++t) n += a[t];
      for (int t = 0; t < nw; ++t) p[t] += a[t] / float(n);
    }
    for (int t = 0; t < T; ++t) pooled[t] = std::max(pooled[t], t < nw ? p[t] / kW : 0.0f);
  }
  // u as [t][d] rows (the hand-written scan reads one key at a time).
  u.resize(size_t(T) * kD);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < kD; ++d) u[size_t(t) * kD + d] = h.K[size_t(d) * T + t] / (h.norm[t] + 1e-8f);
  std::vector<float> U(kD, 0.0f);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < kD; ++d) U[d] += u[size_t(t) * kD + d];
  auto dot = [&](int s, int t) {
    float acc = 0;
    for (int d = 0; d < kD; ++d) acc += u[size_t(s) * kD + d] * u[size_t(t) * kD + d];
    return acc;
  };
  for (int t = 0; t < T; ++t) {
    float a = 0, b = 0;
    for (int d = 0; d < kD; ++d) { a += u[size_t(t) * kD + d] * U[d]; b += u[size_t(t) * kD + d] * u[size_t(t) * kD + d]; }
    others[t] = a - b;
  }
  for (int s = 0; s < T; ++s) {
    int drop = 0;
    for (int t = T - 1; t >= 0; --t)
      if (t != s && dot(s, t) > kThreshold) { drop = t; break; }
    if (drop != s) dropped[drop] += dot(s, drop);
  }
  double z = 0;
  for (int t = 0; t < T; ++t) z += std::exp((others[t] - dropped[t]) / T);
  for (int t = 0; t < T; ++t) {
    float imp = 0;
    for (int k = -r; k <= r; ++k)
      if (t + k >= 0 && t + k < T) imp = std::max(imp, pooled[t + k]);
    const float red = float(std::exp((others[t] - dropped[t]) / T) / z);
    out[t] = kLambda * imp - (1 - kLambda) * red;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int T = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int clusters = argc > 2 ? std::atoi(argv[2]) : 64;
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  if (T <= kW || clusters < 1 || repeats < 1) {
    std::fprintf(stderr, "usage: bench_rkv [T > %d] [clusters >= 1] [repeats >= 1]\n", kW);
    return 2;
  }
  omp_set_num_threads(1);
  const Head head = make_head(T, clusters, 7);
  std::vector<int32_t> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;
  auto policy = kvevict::load_policy("rkv");
  kvevict::ScoreInputs in;
  in.n_layers = 1;
  in.n_kv_heads = 1;
  in.group = kG;
  in.head_dim = kD;
  in.T = T;
  in.prompt_len = T;
  in.W = kW;
  in.set_signal(kvevict::TensorSignal::WindowAttention, head.A.data());
  in.set_signal(kvevict::TensorSignal::Keys, head.K.data());
  in.set_signal(kvevict::TensorSignal::KeyNorm, head.norm.data());
  in.position = pos.data();

  std::vector<float> out_dsl(T), out_hand(T), u, work;
  double best_dsl = 1e30, best_hand = 1e30;
  for (int rep = 0; rep < repeats; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    policy->score(in, false, out_dsl.data());
    best_dsl = std::min(best_dsl, seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    rkv_by_hand(head, out_hand.data(), u, work);
    best_hand = std::min(best_hand, seconds_since(t0));
  }
  double max_abs = 0, scale = 0;
  for (int t = 0; t < T; ++t) {
    max_abs = std::max(max_abs, std::fabs(double(out_dsl[t]) - out_hand[t]));
    scale = std::max(scale, std::fabs(double(out_hand[t])));
  }
  std::printf("R-KV score, one KV head: G=%d, W=%d, head_dim %d, %d tokens, %d key clusters, 1 thread, best of %d\n", kG, kW,
              kD, T, clusters, repeats);
  std::printf("  interpreter : %8.2f ms   (x 90 heads = %.2f s: SmolLM2's 30 layers x 3 KV heads)\n", best_dsl * 1e3,
              best_dsl * 90);
  std::printf("  hand-written: %8.2f ms   (x 90 heads = %.2f s)\n", best_hand * 1e3, best_hand * 90);
  std::printf("  ratio interpreter / hand-written: %.2fx   max |difference| %.2e of max |score| %.2e\n", best_dsl / best_hand,
              max_abs, scale);
  return 0;
}
