// core/engine/channel_selection.h on its own: the pruned count (kvpress's int(head_dim * ratio)),
// the tie rule (lower channel first, NaN lowest), and zeroing in the cache (exact zeros in every
// KvType, other channels, values and positions untouched, bad channels refused).
#include "core/engine/channel_selection.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/model/model_config.h"

namespace kvevict {
namespace {

TEST(ChannelSelection, PrunedCountIsKvpressTruncation) {
  EXPECT_EQ(pruned_channel_count(8, 0.4), 3);
  EXPECT_EQ(pruned_channel_count(128, 0.5), 64);
  EXPECT_EQ(pruned_channel_count(128, 0.4), 51);  // int(51.2)
  EXPECT_EQ(pruned_channel_count(8, 0.0), 0);
  EXPECT_EQ(pruned_channel_count(8, 0.99), 7);
  EXPECT_EQ(pruned_channel_count(8, 1.0), 8);
  EXPECT_EQ(pruned_channel_count(8, -1.0), 0);
  EXPECT_EQ(pruned_channel_count(8, std::nan("")), 0);
  EXPECT_EQ(pruned_channel_count(0, 0.5), 0);
}

TEST(ChannelSelection, LowestScoresTiesToTheLowerChannelNaNFirst) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(select_pruned_channels(std::vector<float>{5, 1, 3, 2}, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(select_pruned_channels(std::vector<float>{2, 1, 1, 1}, 2), (std::vector<int>{1, 2}));
  EXPECT_EQ(select_pruned_channels(std::vector<float>{1, 1, 1, 1}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(select_pruned_channels(std::vector<float>{-1, nan, 0, nan}, 1), (std::vector<int>{1}));
  EXPECT_EQ(select_pruned_channels(std::vector<float>{-1, nan, 0, nan}, 3), (std::vector<int>{0, 1, 3}));
  EXPECT_TRUE(select_pruned_channels(std::vector<float>{1, 2}, 0).empty());
  EXPECT_EQ(select_pruned_channels(std::vector<float>{1, 2}, 5), (std::vector<int>{0, 1}));
  EXPECT_TRUE(select_pruned_channels(std::vector<float>{1, 2}, -3).empty());
}

ModelConfig tiny() {
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.dim = 8;
  c.hidden_dim = 8;
  c.vocab_size = 16;
  c.context_length = 64;
  return c;
}

TEST(ChannelSelection, ZeroKeyChannelsInEveryKvType) {
  for (KvType type : {KvType::F32, KvType::F16, KvType::BF16}) {
    KVCache cache(tiny(), type);
    for (int t = 0; t < 3; ++t) {
      const float key[4] = {1.5f + t, -2.0f, 3.25f, 0.5f}, value[4] = {7, 8, 9, 10};
      cache.append(0, 0, 10 + t, key, value);
    }
    std::vector<float> before(12), after(12), vb(12), va(12);
    cache.reconstruct_keys(0, 0, 0, 3, before.data());
    cache.reconstruct_values(0, 0, 0, 3, vb.data());
    const std::vector<int> channels = {1, 3};
    zero_key_channels(cache, 0, 0, channels);
    cache.reconstruct_keys(0, 0, 0, 3, after.data());
    cache.reconstruct_values(0, 0, 0, 3, va.data());
    for (int t = 0; t < 3; ++t)
      for (int c = 0; c < 4; ++c)
        EXPECT_EQ(after[t * 4 + c], (c == 1 || c == 3) ? 0.0f : before[t * 4 + c]) << static_cast<int>(type);
    EXPECT_EQ(va, vb);
    EXPECT_EQ(cache.positions(0, 0)[2], 12);
    EXPECT_THROW(zero_key_channels(cache, 0, 0, std::vector<int>{4}), std::invalid_argument);
    EXPECT_THROW(zero_key_channels(cache, 0, 0, std::vector<int>{-1}), std::invalid_argument);
    zero_key_channels(cache, 0, 0, std::vector<int>{});  // nothing to do
  }
}

}  // namespace
}  // namespace kvevict
