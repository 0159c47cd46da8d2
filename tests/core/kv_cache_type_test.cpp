// The KV cache with F16/BF16 storage (kv_type.h): appends round once, every reader gets the
// rounded rows as f32, byte counts follow the element size, and the cache operations (keep,
// unfold, position re-assignment, pre-RoPE recovery, codebook stage) work on typed storage.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/decode/kv_cache.h"
#include "core/decode/rope.h"

namespace kvevict {
namespace {

ModelConfig config() {
  ModelConfig c;
  c.n_layers = 2;
  c.dim = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 8;
  c.vocab_size = 300;
  c.context_length = 4096;
  return c;
}

float rounded(KvType t, float x) {
  return t == KvType::F16 ? f16_to_f32_scalar(f32_to_f16_scalar(x)) : bf16_to_f32_scalar(f32_to_bf16_scalar(x));
}

// Appends n random rows to every (layer, KV head); returns the f32 rows, [layer][head][t * d + i] (key, value).
struct Rows {
  std::vector<std::vector<std::vector<float>>> keys, values;
};
Rows fill(KVCache& cache, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int d = cache.head_dim();
  Rows r;
  r.keys.assign(cache.n_layers(), std::vector<std::vector<float>>(cache.n_kv_heads()));
  r.values = r.keys;
  std::vector<float> k(d), v(d);
  for (int t = 0; t < n; ++t)
    for (int l = 0; l < cache.n_layers(); ++l)
      for (int h = 0; h < cache.n_kv_heads(); ++h) {
        for (int i = 0; i < d; ++i) {
          k[i] = normal(rng);
          v[i] = normal(rng);
        }
        cache.append(l, h, t, k.data(), v.data());
        r.keys[l][h].insert(r.keys[l][h].end(), k.begin(), k.end());
        r.values[l][h].insert(r.values[l][h].end(), v.begin(), v.end());
      }
  return r;
}

class TypedCache : public ::testing::TestWithParam<KvType> {};

TEST_P(TypedCache, RowsAreRoundedOnceAndReadBackAsF32) {
  const KvType t = GetParam();
  KVCache cache(config(), t);
  EXPECT_EQ(cache.kv_type(), t);
  const Rows r = fill(cache, 37, 1);
  std::vector<float> scratch, out(37 * 8);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h) {
      const float* k = cache.keys_or_reconstruct(l, h, scratch);
      for (size_t i = 0; i < r.keys[l][h].size(); ++i) ASSERT_EQ(k[i], rounded(t, r.keys[l][h][i]));
      cache.reconstruct_values(l, h, 3, 37, out.data());
      for (size_t i = 0; i < 34 * 8; ++i) ASSERT_EQ(out[i], rounded(t, r.values[l][h][3 * 8 + i]));
    }
  // A float pointer into storage that holds no floats would be a lie.
  EXPECT_THROW(cache.keys(0, 0), std::logic_error);
  EXPECT_THROW(cache.values(1, 1), std::logic_error);
}

TEST_P(TypedCache, BytesFollowTheElementSize) {
  KVCache cache(config(), GetParam());
  KVCache reference(config(), KvType::F32);
  fill(cache, 50, 2);
  fill(reference, 50, 2);
  const size_t per_entry = 2 * 8 * 2 + 4;  // K and V in 2-byte elements, one int32 position
  EXPECT_EQ(cache.bytes_in_use(), 50u * 4 * per_entry);
  EXPECT_EQ(reference.bytes_in_use(), 50u * 4 * (2 * 8 * 4 + 4));
  EXPECT_EQ(cache.bytes_for_uniform_length(4096), 4096u * 4 * per_entry);
  cache.keep(0, 1, std::vector<int>{0, 7});
  EXPECT_EQ(cache.bytes_in_use(), (3u * 50 + 2) * per_entry);
  cache.shrink_to_fit();
  EXPECT_EQ(cache.bytes_reserved(), cache.bytes_in_use());
}

TEST_P(TypedCache, KeepAndUnfoldMoveStoredRowsUnchanged) {
  const KvType t = GetParam();
  KVCache cache(config(), t);
  const Rows r = fill(cache, 20, 3);
  const std::vector<int> ascending = {1, 4, 19}, shuffled = {19, 0, 5};
  cache.keep(0, 0, ascending);
  cache.keep(1, 1, shuffled);
  std::vector<float> row(8);
  for (int i = 0; i < 3; ++i) {
    cache.reconstruct_keys(0, 0, i, i + 1, row.data());
    for (int j = 0; j < 8; ++j) ASSERT_EQ(row[j], rounded(t, r.keys[0][0][ascending[i] * 8 + j]));
    cache.reconstruct_values(1, 1, i, i + 1, row.data());
    for (int j = 0; j < 8; ++j) ASSERT_EQ(row[j], rounded(t, r.values[1][1][shuffled[i] * 8 + j]));
  }
  cache.unfold();
  ASSERT_EQ(cache.n_stored_heads(), 4);
  EXPECT_EQ(cache.length(1, 3), 3);  // query head 3 copies KV head 1
  cache.reconstruct_values(1, 3, 0, 1, row.data());
  for (int j = 0; j < 8; ++j) EXPECT_EQ(row[j], rounded(t, r.values[1][1][19 * 8 + j]));
  cache.append(1, 1, 99, row.data(), row.data());  // reaches both copies
  EXPECT_EQ(cache.length(1, 2), 4);
  EXPECT_EQ(cache.length(1, 3), 4);
}

TEST_P(TypedCache, PreRopeRecoveryAndReassignmentWorkWithinTheTypesPrecision) {
  const KvType t = GetParam();
  const ModelConfig c = config();
  KVCache cache(c, t);
  Rope rope(c);
  std::mt19937 rng(4);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> raw;
  const std::vector<int> positions = {0, 3, 100, 1000, 4000};
  for (int p : positions) {
    std::vector<float> k(8), v(8, 0.0f);
    for (float& x : k) x = normal(rng);
    raw.push_back(k);
    rope.forward(k.data(), p);
    cache.append(0, 1, p, k.data(), v.data());
  }
  // One rounding of the rotated key, one rounding per re-rotation: |error| <= a few ulps of the type.
  const double tol = (t == KvType::F16 ? 0x1p-11 : 0x1p-8) * 4;
  const std::vector<float> pre = cache.keys_pre_rope(0, 1);
  for (size_t e = 0; e < positions.size(); ++e)
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(pre[e * 8 + i], raw[e][i], tol * 4) << e;
  cache.reassign_positions(0, 1);
  std::vector<float> got(8);
  for (size_t e = 0; e < positions.size(); ++e) {
    EXPECT_EQ(cache.positions(0, 1)[e], static_cast<int32_t>(e));
    std::vector<float> want = raw[e];
    rope.forward(want.data(), static_cast<int>(e));
    cache.reconstruct_keys(0, 1, e, e + 1, got.data());
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], tol * 4) << e;
  }
  // The entry already at its index (position 0) is untouched: still the single rounding.
  cache.reconstruct_keys(0, 1, 0, 1, got.data());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], rounded(t, raw[0][i]));
}

INSTANTIATE_TEST_SUITE_P(Types, TypedCache, ::testing::Values(KvType::F16, KvType::BF16),
                         [](const auto& info) { return std::string(kv_type_name(info.param)); });

}  // namespace
}  // namespace kvevict
