#pragma once
// Random scripts of appends, column-sum adds and keeps run against an accumulated attention store
// (core/engine/accumulated_attention_store.h) and an independent reference, the host engine's own
// rule written out plainly: per query head a vector of floats, `acc[t] += add[t]` per block (new
// entries start at zero) and a keep that takes acc[kept[i]] in kept order. Shared by the CPU test
// (the twin) and the GPU test (the CUDA store), which differ only in where the sums live.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/decode/column_sums_signal.h"
#include "core/engine/accumulated_attention_store.h"

namespace kvevict::test {

// Turns packed host sums [rows][stride] into a ColumnSumsSignal of the store's device.
using DeviceSums = std::function<ColumnSumsSignal(const std::vector<float>& packed, int rows, int64_t stride)>;

struct AccumulatedReference {
  int group = 1;
  std::vector<std::vector<std::vector<float>>> acc;  // [layer][query head][entry]

  void grow(int layer, int head, int64_t length) {
    for (int g = 0; g < group; ++g) acc[layer][head * group + g].resize(static_cast<size_t>(length), 0.0f);
  }
  void add(int layer, const std::vector<std::vector<float>>& sums, const std::vector<int64_t>& lengths) {
    for (size_t q = 0; q < sums.size(); ++q) {
      std::vector<float>& a = acc[layer][q];
      a.resize(static_cast<size_t>(lengths[q / group]), 0.0f);
      for (size_t t = 0; t < a.size() && t < sums[q].size(); ++t) a[t] += sums[q][t];
    }
  }
  void keep(int layer, int head, const std::vector<int>& kept, int64_t length) {
    grow(layer, head, length);
    for (int g = 0; g < group; ++g) {
      std::vector<float>& a = acc[layer][head * group + g];
      std::vector<float> next(kept.size());
      for (size_t i = 0; i < kept.size(); ++i) next[i] = a[static_cast<size_t>(kept[i])];
      a.swap(next);
    }
  }
  std::vector<float> block(int layer, int head, int64_t length) {
    grow(layer, head, length);
    std::vector<float> out;
    for (int g = 0; g < group; ++g) {
      const std::vector<float>& a = acc[layer][head * group + g];
      out.insert(out.end(), a.begin(), a.end());
    }
    return out;
  }
};

// Runs `steps` random operations on `store` and the reference; every read compares bit for bit.
// Returns the number of reads compared.
inline int run_accumulated_script(AccumulatedAttentionStore& store, uint32_t seed, int steps,
                                  const DeviceSums& device_sums) {
  const int layers = 2, heads = 3, group = 2;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  store.reset(layers, heads, group);
  AccumulatedReference ref;
  ref.group = group;
  ref.acc.assign(layers, std::vector<std::vector<float>>(heads * group));
  std::vector<std::vector<int64_t>> length(layers, std::vector<int64_t>(heads, 0));
  int reads = 0;
  for (int step = 0; step < steps; ++step) {
    const int layer = static_cast<int>(rng() % layers);
    std::vector<int64_t>& len = length[layer];
    const int op = static_cast<int>(rng() % 6);
    if (op <= 1) {  // append (a prompt block the first time) and add its column sums
      for (int h = 0; h < heads; ++h) len[h] += step < 2 ? 20 + rng() % 30 : rng() % 3;
      std::vector<std::vector<float>> sums(heads * group);
      for (int q = 0; q < heads * group; ++q) {
        // Now and then a row shorter than its head (a host decoder's row adds nothing past its end).
        const int64_t n = (rng() % 7 == 0 && len[q / group] > 0) ? len[q / group] - 1 : len[q / group];
        for (int64_t t = 0; t < n; ++t) sums[q].push_back(value(rng));
      }
      if (op == 0) {
        store.add(layer, len, sums);
      } else {
        const int64_t stride = *std::max_element(len.begin(), len.end()) + static_cast<int64_t>(rng() % 3);
        std::vector<float> packed(static_cast<size_t>(heads * group * stride), 0.0f);
        for (int q = 0; q < heads * group; ++q)
          std::copy(sums[q].begin(), sums[q].end(), packed.begin() + static_cast<size_t>(q * stride));
        store.add(layer, len, device_sums(packed, heads * group, stride));
      }
      ref.add(layer, sums, len);
    } else if (op <= 3) {  // entries appended with no sums yet, then a keep in a random order
      const int h = static_cast<int>(rng() % heads);
      len[h] += rng() % 3;
      std::vector<int> all(static_cast<size_t>(len[h]));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(all.size() * (1 + rng() % 4) / 4);
      store.keep(layer, h, all, len[h]);
      ref.keep(layer, h, all, len[h]);
      len[h] = static_cast<int64_t>(all.size());
    } else {  // a read, which applies what is pending
      const int h = static_cast<int>(rng() % heads);
      const std::vector<float> got = store.read(layer, len, h);
      const std::vector<float> want = ref.block(layer, h, len[h]);
      EXPECT_EQ(got, want) << "seed " << seed << " step " << step << " layer " << layer << " head " << h;
      ++reads;
    }
  }
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      EXPECT_EQ(store.read(l, length[l], h), ref.block(l, h, length[l][h])) << "seed " << seed << " at the end";
      ++reads;
    }
  return reads;
}

}  // namespace kvevict::test
