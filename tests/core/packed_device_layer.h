#pragma once
// For the GPU tests that compare a runner over the device cache with its CPU twin over a
// DeviceKvTwin layer (segment_attention_gpu_test.cpp, replay_attention_gpu_test.cpp): the twin's
// layer 0 filled with random rows at positions 0 .. n - 1, and its heads copied to device memory,
// packed one after another (head h at row h * stride, stride = the longest head), with the view of
// them. CUDA builds only.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/decode/cuda/device_memory.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/device_kv_view.h"
#include "core/decode/kv_type.h"

namespace kvevict::test {

// Writes n random rows (keys and values from `normal`) at positions 0 .. n - 1 into each of the n_kv
// stored heads of the twin's layer 0 (head_dim d).
inline void write_random_rows(DeviceKvTwin& twin, int n_kv, int d, int n, std::mt19937& rng,
                              std::normal_distribution<float>& normal) {
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) positions[size_t(t)] = t;
  std::vector<float> keys(size_t(n) * d), values(keys.size());
  for (int h = 0; h < n_kv; ++h) {
    for (float& x : keys) x = normal(rng);
    for (float& x : values) x = normal(rng);
    twin.write_rows(0, h, 0, n, keys.data(), values.data(), positions.data());
  }
}

struct PackedDeviceLayer {
  cuda::DeviceArray<uint8_t> keys, values;
  cuda::DeviceArray<int32_t> positions;
  DeviceKvLayerView view;

  // `host`: a view over host arenas (keys, values and positions; values may be null).
  explicit PackedDeviceLayer(const DeviceKvLayerView& host) : view(host) {
    int64_t stride = 0;
    for (int h = 0; h < host.n_heads; ++h) stride = std::max(stride, host.length[h]);
    const size_t row_bytes = size_t(host.head_dim) * kv_type_size(host.type);
    std::vector<uint8_t> k(size_t(host.n_heads) * size_t(stride) * row_bytes), v(host.values ? k.size() : 0);
    std::vector<int32_t> p(size_t(host.n_heads) * size_t(stride));
    for (int h = 0; h < host.n_heads; ++h) {
      const size_t to = size_t(h) * size_t(stride), from = size_t(host.base_row[h]), n = size_t(host.length[h]);
      std::memcpy(k.data() + to * row_bytes, static_cast<const uint8_t*>(host.keys) + from * row_bytes, n * row_bytes);
      if (host.values)
        std::memcpy(v.data() + to * row_bytes, static_cast<const uint8_t*>(host.values) + from * row_bytes,
                    n * row_bytes);
      std::memcpy(p.data() + to, host.positions + from, n * sizeof(int32_t));
      view.base_row[h] = int64_t(to);
    }
    keys.upload(k);
    positions.upload(p);
    view.keys = keys.data();
    view.positions = positions.data();
    view.values = nullptr;
    if (host.values) {
      values.upload(v);
      view.values = values.data();
    }
  }
};

}  // namespace kvevict::test
