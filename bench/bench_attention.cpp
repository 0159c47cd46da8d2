// bench_attention: the block attention kernel alone (prefill of N tokens over an empty cache, and
// one query over an N-entry cache), in GFLOP/s of useful causal work.
//   bench_attention [--tokens 2048] [--heads 9] [--kv-heads 3] [--head-dim 64] [--threads 2]
//                   [--kv-type f16|bf16|f32]   (the cache's element type, default f16)
#include <omp.h>

#include <chrono>
#include <iostream>
#include <random>
#include <string>

#include "core/decode/block_attention.h"
#include "core/decode/cpu_ops.h"

using namespace kvevict;

static double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int n = 2048, heads = 9, kv_heads = 3, hd = 64, threads = 2;
  KvType kv_type = KvType::F16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--kv-type") {
      try {
        kv_type = parse_kv_type(argv[i + 1], "--kv-type");
      } catch (const std::exception& e) {
        std::cerr << e.what() << "\n";
        return 2;
      }
      continue;
    }
    const int v = std::stoi(argv[i + 1]);
    if (a == "--tokens") n = v;
    else if (a == "--heads") heads = v;
    else if (a == "--kv-heads") kv_heads = v;
    else if (a == "--head-dim") hd = v;
    else if (a == "--threads") threads = v;
    else return 2;
  }
  cpu::set_threads(threads);
  ModelConfig c;
  c.n_layers = 1, c.n_heads = heads, c.n_kv_heads = kv_heads, c.head_dim = hd, c.dim = heads * hd;
  KVCache cache(c, kv_type);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> q(size_t(n) * heads * hd), out(q.size()), row(hd);
  for (float& v : q) v = normal(rng);
  for (int h = 0; h < kv_heads; ++h) {
    for (int t = 0; t < n; ++t) {
      for (float& v : row) v = normal(rng);
      cache.append(0, h, t, row.data(), row.data());
    }
  }
  BlockAttentionArgs args;
  args.queries = q.data();
  args.n = n;
  args.n_heads = heads;
  args.group = heads / kv_heads;
  args.out = out.data();
  double best = 1e30, best_cpu = 1e30;
  for (int r = 0; r < 3; ++r) {
    const auto t = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    block_attention(cache, args);
    best_cpu = std::min(best_cpu, thread_cpu_seconds() - c0);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  const double flops = 2.0 * 2.0 * hd * heads * (double(n) * (n + 1) / 2);
  std::cout << "prefill attention " << n << " tokens: " << best << " s, " << flops / best / 1e9 << " GFLOP/s; "
            << flops / best_cpu / 1e9 << " GFLOP per CPU-second\n";

  // One query over the full cache (decode), using the last query row.
  args.queries = q.data() + size_t(n - 1) * heads * hd;
  args.out = out.data();
  args.n = 1;
  best = 1e30;
  for (int r = 0; r < 20; ++r) {
    const auto t = std::chrono::steady_clock::now();
    block_attention(cache, args);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  const double bytes = 2.0 * kv_heads * n * hd * kv_type_size(kv_type);
  std::cout << "decode attention over " << n << " entries (" << kv_type_name(kv_type) << " cache, "
            << cache.bytes_in_use() << " bytes): " << best * 1e6 << " us, " << bytes / best / 1e9
            << " GB/s of K/V\n";
  return 0;
}
