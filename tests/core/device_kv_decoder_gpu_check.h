#pragma once
// The CUDA decoder's device-resident cache against its host cache, for the GPU tests: every
// (layer, KV head) as stored words and positions after the mirror's flush, a codebook head's words
// being its reconstruction rounded to the KvType (device_kv_mirror_rig.h's host_words). Asking for
// the host cache brings it up to date first (deferred rows, placeholders, codebook entries).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/decode/decoder.h"
#include "device_kv_mirror_rig.h"

namespace kvevict {

// An observer that asks for nothing, but whose presence keeps the CUDA decoder appending every row
// to the host cache (a call without one defers them): the reference of the deferred runs.
struct WatchOnly : ForwardObserver {
  ObservationRequest request() const override { return {}; }
  void after_layer(const LayerSignals&, KVCache&) override {}
};

}  // namespace kvevict

#if defined(KVEVICT_HAVE_CUDA)
#include "core/decode/cuda/cuda_decoder.h"
#include "core/decode/cuda/device_kv_cache.h"

namespace kvevict {

inline ::testing::AssertionResult device_equals_host(Decoder& decoder) {
  const cuda::DeviceKvCache* dev = synced_device_kv_cache(decoder);
  if (!dev) return ::testing::AssertionFailure() << "no device-resident cache";
  const KVCache& cache = decoder.cache();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const DeviceKvHeadContents d = dev->read_head(l, h);
      const std::string at = "layer " + std::to_string(l) + " head " + std::to_string(h);
      if (d.positions.size() != static_cast<size_t>(cache.length(l, h)))
        return ::testing::AssertionFailure() << at << ": lengths differ";
      if (!std::equal(d.positions.begin(), d.positions.end(), cache.positions(l, h)))
        return ::testing::AssertionFailure() << at << ": positions differ";
      if (d.keys != host_words(cache, l, h, true) || d.values != host_words(cache, l, h, false))
        return ::testing::AssertionFailure() << at << ": stored words differ";
    }
  return ::testing::AssertionSuccess();
}

}  // namespace kvevict
#endif
