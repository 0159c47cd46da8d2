#pragma once
// A KV cache of random entries for decode benchmarks that skip the prefill (bench_gpu_decode's
// `--cache synthetic`): deterministic whatever the number of threads that draw it.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/model/model_config.h"

namespace kvevict::bench {

// splitmix64: one stream per (layer, KV head, block of entries) of the synthetic cache.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Block `block` (its `count` entries) of one (layer, KV head) of the synthetic cache: keys and
// values ([count][head_dim] each) uniform in [-1, 1), two 24-bit draws per 64-bit output. The
// stream depends on (layer, head, block) only, so the data do not depend on how blocks meet threads.
void fill_synthetic_block(int layer, int head, int64_t block, int64_t count, int head_dim, float* keys,
                          float* values) {
  uint64_t state = 0x6A09E667F3BCC909ull ^ (static_cast<uint64_t>(layer) << 48) ^ (static_cast<uint64_t>(head) << 32) ^
                   static_cast<uint64_t>(block);
  splitmix64(state);  // decorrelates neighbouring seeds before the first draw used
  const size_t n = static_cast<size_t>(count) * static_cast<size_t>(head_dim);
  auto fill = [&state](float* out, size_t size) {
    constexpr float kScale = 0x1.0p-23f;  // 24 bits -> [0, 2), minus 1 -> [-1, 1)
    size_t i = 0;
    for (; i + 2 <= size; i += 2) {
      const uint64_t bits = splitmix64(state);
      out[i] = static_cast<float>(bits >> 40) * kScale - 1.0f;
      out[i + 1] = static_cast<float>((bits >> 8) & 0xFFFFFFu) * kScale - 1.0f;
    }
    if (i < size) out[i] = static_cast<float>(splitmix64(state) >> 40) * kScale - 1.0f;
  };
  fill(keys, n);
  fill(values, n);
}

// A cache of `entries` random entries per (layer, KV head), positions evenly spread over
// [0, context): what a policy keeping that many entries leaves, as far as attention's cost goes.
// Up to 128K entries x 32 layers x 8 heads (16 GiB of f16 K/V): the random rows are drawn in
// parallel (OpenMP over (head, block) of one chunk of a layer), the appends stay on this thread,
// chunk by chunk, so the cache is mutated by one thread only.
KVCache synthetic_cache(const ModelConfig& config, KvType type, int context, int entries) {
  constexpr int64_t kBlock = 1024;      // entries per random stream
  constexpr int64_t kChunkBlocks = 8;   // blocks per head drawn before they are appended
  KVCache cache(config, type);
  const int heads = config.n_kv_heads, head_dim = config.head_dim;
  const int64_t blocks = (entries + kBlock - 1) / kBlock;
  const size_t head_stride = static_cast<size_t>(kChunkBlocks * kBlock) * static_cast<size_t>(head_dim);
  std::vector<float> keys(static_cast<size_t>(heads) * head_stride), values(keys.size());
  for (int l = 0; l < config.n_layers; ++l)
    for (int64_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
      const int64_t chunk_blocks = std::min(kChunkBlocks, blocks - b0);
      const int64_t tasks = static_cast<int64_t>(heads) * chunk_blocks;
      // Threads only where they pay (a small cache is drawn faster than a team starts on a busy machine).
#pragma omp parallel for schedule(static) if (tasks * kBlock * head_dim >= (int64_t{1} << 20))
      for (int64_t t = 0; t < tasks; ++t) {
        const int h = static_cast<int>(t / chunk_blocks);
        const int64_t j = t % chunk_blocks, block = b0 + j;
        const int64_t count = std::min(kBlock, entries - block * kBlock);
        const size_t at = static_cast<size_t>(h) * head_stride + static_cast<size_t>(j * kBlock) * head_dim;
        fill_synthetic_block(l, h, block, count, head_dim, keys.data() + at, values.data() + at);
      }
      const int64_t first = b0 * kBlock, last = std::min<int64_t>(entries, (b0 + chunk_blocks) * kBlock);
      for (int h = 0; h < heads; ++h)
        for (int64_t i = first; i < last; ++i) {
          const size_t at = static_cast<size_t>(h) * head_stride + static_cast<size_t>(i - first) * head_dim;
          const int32_t position = static_cast<int32_t>(i * context / entries);
          cache.append(l, h, position, keys.data() + at, values.data() + at);
        }
    }
  return cache;
}

}  // namespace kvevict::bench
