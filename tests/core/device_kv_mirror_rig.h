#pragma once
// What the device KV mirror's CPU tests share (device_kv_mirror_test.cpp,
// device_kv_mirror_codebook_test.cpp): the twin-equals-host check, random blocks, the small
// geometries, the Decoder-mode rig (a mirrored host cache, a reference host cache that takes
// every row itself, and the twin as the device) and the comparison of two caches' codebooks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/decode/device_kv_mirror.h"
#include "core/decode/device_kv_twin.h"
#include "core/decode/kv_cache.h"
#include "device_kv_test_ops.h"

namespace kvevict {

inline DeviceKvGeometry geometry_of(const KVCache& cache) {
  return {cache.n_layers(), cache.n_kv_heads(), cache.head_dim(), cache.kv_type()};
}

// The head's keys or values as the device stores them: the host's own words for a dense head,
// the reconstruction rounded to the KvType for a codebook head.
inline std::vector<uint16_t> host_words(const KVCache& cache, int l, int h, bool keys) {
  const int len = cache.length(l, h), d = cache.head_dim();
  if (!cache.is_codebook(l, h)) {
    const KvRows& rows = keys ? cache.stored_keys(l, h) : cache.stored_values(l, h);
    if (cache.kv_type() == KvType::F32) {
      std::vector<uint16_t> w(static_cast<size_t>(len) * d * 2);
      if (len > 0) std::memcpy(w.data(), rows.f32(), w.size() * sizeof(uint16_t));
      return w;
    }
    return std::vector<uint16_t>(rows.bits16(), rows.bits16() + static_cast<size_t>(len) * d);
  }
  std::vector<float> f(static_cast<size_t>(len) * d);
  if (keys) cache.reconstruct_keys(l, h, 0, len, f.data());
  else cache.reconstruct_values(l, h, 0, len, f.data());
  std::vector<uint16_t> out;
  for (int t = 0; t < len; ++t) {
    const auto row = device_kv_test::stored_words(cache.kv_type(), f.data() + static_cast<size_t>(t) * d, d);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

inline ::testing::AssertionResult twin_equals_host(const DeviceKvTwin& twin, const KVCache& cache) {
  for (int l = 0; l < cache.n_layers(); ++l) {
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const DeviceKvHeadContents dev = twin.read_head(l, h);
      const int len = cache.length(l, h);
      const std::string at = "layer " + std::to_string(l) + " head " + std::to_string(h);
      if (static_cast<int>(dev.positions.size()) != len)
        return ::testing::AssertionFailure() << at << ": " << dev.positions.size() << " entries on the twin, " << len
                                             << " on the host";
      if (!std::equal(dev.positions.begin(), dev.positions.end(), cache.positions(l, h)))
        return ::testing::AssertionFailure() << at << ": positions differ";
      if (dev.keys != host_words(cache, l, h, true)) return ::testing::AssertionFailure() << at << ": keys differ";
      if (dev.values != host_words(cache, l, h, false)) return ::testing::AssertionFailure() << at << ": values differ";
    }
  }
  return ::testing::AssertionSuccess();
}

// A block of n rows of K and V, [n][kv_dim] each, N(0, 1).
inline std::pair<std::vector<float>, std::vector<float>> random_block(std::mt19937& rng, int n, int kv_dim) {
  std::normal_distribution<float> normal;
  std::vector<float> k(static_cast<size_t>(n) * kv_dim), v(k.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  return {std::move(k), std::move(v)};
}

// Two layers of two KV heads (head_dim 8): the deferred and placeholder tests' geometry.
inline ModelConfig two_layer_config() {
  ModelConfig c;
  c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.dim = 32, c.hidden_dim = 8;
  c.vocab_size = 8, c.context_length = 4096;
  return c;
}

// A host cache mirrored in Decoder mode onto a twin (the device), and a reference host cache that
// takes every row itself: the deferred, placeholder and position-only tests' setup.
struct DecoderModeRig {
  KVCache cache, reference;
  DeviceKvTwin twin;
  DeviceKvBackendFor<DeviceKvTwin> backend;
  DeviceKvMirror mirror;
  DecoderModeRig(const ModelConfig& c, KvType type)
      : cache(c, type), reference(c, type), twin(geometry_of(cache)), backend(twin),
        mirror(cache, backend, MirrorAppends::Decoder) {}
};

// A block of rows ([n][kv_dim], positions from `position`) appended as a decoder appends it: to the
// twin (the device), to the reference host cache, and to `host` when the host takes real rows now.
inline void append_block(DeviceKvTwin& twin, KVCache& reference, KVCache* host, int layer, int position,
                  const std::vector<float>& k, const std::vector<float>& v) {
  const int d = reference.head_dim(), heads = reference.n_kv_heads(), kv_dim = heads * d;
  const int n = static_cast<int>(k.size()) / kv_dim;
  twin.append(layer, n, k.data(), v.data(), kv_dim, std::vector<int32_t>(static_cast<size_t>(heads), position));
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(i) * kv_dim + static_cast<size_t>(h) * d;
      reference.append(layer, h, position + i, k.data() + at, v.data() + at);
      if (host) host->append(layer, h, position + i, k.data() + at, v.data() + at);
    }
}

// Whether two caches hold the same codebooks (codes, indices, norms) and positions, exactly.
inline ::testing::AssertionResult same_codebooks(const KVCache& a, const KVCache& b) {
  for (int l = 0; l < a.n_layers(); ++l) {
    const LayerCodebook *sa = a.layer_codebook(l), *sb = b.layer_codebook(l);
    if ((sa == nullptr) != (sb == nullptr) ||
        (sa && (sa->key_codes != sb->key_codes || sa->value_codes != sb->value_codes)))
      return ::testing::AssertionFailure() << "layer " << l << ": shared codes differ";
    for (int h = 0; h < a.n_kv_heads(); ++h) {
      const std::string at = "layer " + std::to_string(l) + " head " + std::to_string(h);
      const CodebookHead *x = a.codebook(l, h), *y = b.codebook(l, h);
      if (!x || !y) return ::testing::AssertionFailure() << at << ": not a codebook head on both";
      if (x->key_codes != y->key_codes || x->value_codes != y->value_codes)
        return ::testing::AssertionFailure() << at << ": codes differ (" << x->key_codes.size() / a.head_dim() << " / "
                                             << y->key_codes.size() / a.head_dim() << " key codes)";
      if (x->key_index != y->key_index || x->value_index != y->value_index)
        return ::testing::AssertionFailure() << at << ": code indices differ";
      if (x->key_norm != y->key_norm || x->value_norm != y->value_norm)
        return ::testing::AssertionFailure() << at << ": norms differ";
      if (a.length(l, h) != b.length(l, h) ||
          !std::equal(a.positions(l, h), a.positions(l, h) + a.length(l, h), b.positions(l, h)))
        return ::testing::AssertionFailure() << at << ": positions differ";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvevict
