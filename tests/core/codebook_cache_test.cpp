// Codebook-backed KV heads (SpindleKV): byte counts by hand, reconstruction and the decode append
// rule, compaction, attention/logits equal to attention on the reconstructed vectors, a no-merge
// codebook equal to the dense cache, and the spindlekv policy decoding on stories260K.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/decode/block_attention.h"
#include "core/decode/decoder.h"
#include "core/decode/rope.h"
#include "core/engine/codebook.h"
#include "core/engine/engine.h"
#include "core/model/synthetic_model.h"
#include "dsl/policy_loader.h"
#include "test_models.h"

namespace kvevict {
namespace {

ModelConfig small_config() {
  ModelConfig c;
  c.name = "codebook-cache-test";
  c.n_layers = 3;
  c.dim = 48;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 64;
  c.vocab_size = 300;
  c.context_length = 512;
  return c;
}

std::vector<float> random_vectors(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<int> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& v : t) v = static_cast<int>(rng() % 300);
  return t;
}

// Every head of `cache` replaced by its codebook (what the engine's codebook stage does).
void to_codebook(KVCache& cache, double theta_key, double theta_value) {
  const int d = cache.head_dim();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const int T = cache.length(l, h);
      const std::vector<float> pre = cache.keys_pre_rope(l, h);
      Codebook ck = build_codebook(pre.data(), T, d, theta_key);
      Codebook cv = build_codebook(cache.values(l, h), T, d, theta_value);
      CodebookHead cb{std::move(ck.codes), std::move(cv.codes), std::move(ck.index), std::move(cv.index),
                      std::move(ck.norm),  std::move(cv.norm),  theta_key,           theta_value};
      cache.set_codebook(l, h, std::move(cb));
    }
}

// A dense cache holding exactly the vectors the codebook cache reconstructs.
KVCache dense_copy(const KVCache& cache, const ModelConfig& config) {
  KVCache out(config, cache.kv_type());  // same element type: "exactly the vectors"
  const int d = cache.head_dim();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const int T = cache.length(l, h);
      std::vector<float> k(static_cast<size_t>(T) * d), v(k.size());
      cache.reconstruct_keys(l, h, 0, T, k.data());
      cache.reconstruct_values(l, h, 0, T, v.data());
      for (int t = 0; t < T; ++t)
        out.append(l, h, cache.positions(l, h)[t], k.data() + static_cast<size_t>(t) * d, v.data() + static_cast<size_t>(t) * d);
    }
  return out;
}

size_t hand_count(const KVCache& cache) {
  size_t total = 0;
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) {
      const size_t T = cache.length(l, h);
      if (const CodebookHead* cb = cache.codebook(l, h)) {
        total += (cb->key_codes.size() + cb->value_codes.size()) * 4 + T * (4 + 4 + 4 + 4 + 4);
      } else {
        total += T * (2 * cache.head_dim() * 4 + 4);
      }
    }
  return total;
}

int64_t total_codes(const KVCache& cache) {
  int64_t n = 0;
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h)
      n += static_cast<int64_t>(cache.codebook(l, h)->key_codes.size() / cache.head_dim());
  return n;
}

TEST(CodebookCache, BytesInUseIsTheStoredArrays) {
  ModelConfig c = small_config();
  c.n_layers = 1;
  c.head_dim = 4;
  KVCache cache(c, KvType::F32);
  const auto v = random_vectors(5 * 4, 1);
  for (int t = 0; t < 3; ++t) cache.append(0, 0, t, v.data() + t * 4, v.data() + t * 4);
  for (int t = 0; t < 2; ++t) cache.append(0, 1, t, v.data() + t * 4, v.data() + t * 4);
  CodebookHead cb;
  cb.key_codes = {1, 0, 0, 0, 0, 1, 0, 0};            // 2 codes
  cb.value_codes = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};  // 3 codes
  cb.key_index = {0, 1, 0};
  cb.value_index = {0, 1, 2};
  cb.key_norm = {1, 2, 3};
  cb.value_norm = {1, 2, 3};
  cache.set_codebook(0, 0, cb);
  // Head 0: 5 codes x 4 floats + 3 tokens x (2 indices + 2 norms + 1 position); head 1: 2 dense entries.
  EXPECT_EQ(cache.bytes_in_use(), (5 * 4 * 4 + 3 * 5 * 4) + 2 * (2 * 4 * 4 + 4));
  EXPECT_EQ(cache.head_bytes_in_use(0, 0), 5u * 16 + 3 * 20);
  EXPECT_THROW(cache.keys(0, 0), std::logic_error);
  EXPECT_THROW(cache.mutable_values(0, 0), std::logic_error);
  EXPECT_NO_THROW(cache.keys(0, 1));
  // The dense arrays are released, not just emptied (they held 3 x 2 x 4 floats, 96 bytes or more;
  // the slack covers the positions vector's spare capacity).
  EXPECT_LE(cache.bytes_reserved(), cache.bytes_in_use() + 16);

  CodebookHead bad = cb;
  bad.key_index = {0, 1};
  EXPECT_THROW(cache.set_codebook(0, 1, bad), std::invalid_argument);
  bad = cb;
  bad.key_index = {0, 2};  // code 2 does not exist (and head 1 has 2 entries)
  bad.key_norm = {1, 1};
  bad.value_index = {0, 1};
  bad.value_norm = {1, 1};
  EXPECT_THROW(cache.set_codebook(0, 1, bad), std::invalid_argument);
  cache.clear();
  EXPECT_FALSE(cache.is_codebook(0, 0));
}

TEST(CodebookCache, ReconstructsWithRopeAndAppendsByTheDecodeRule) {
  ModelConfig c = small_config();
  c.n_layers = 1;
  KVCache cache(c, KvType::F32);
  const int d = c.head_dim;
  const Rope rope(c);
  const auto v = random_vectors(static_cast<size_t>(3) * d, 2);
  for (int t = 0; t < 3; ++t) {
    std::vector<float> k(v.begin() + t * d, v.begin() + (t + 1) * d);
    rope.forward(k.data(), 10 + t);
    cache.append(0, 0, 10 + t, k.data(), v.data() + t * d);
  }
  to_codebook(cache, 1.5, 1.5);  // nothing merges: 3 codes each
  ASSERT_TRUE(cache.is_codebook(0, 0));
  std::vector<float> k(3 * d), val(3 * d);
  cache.reconstruct_keys(0, 0, 0, 3, k.data());
  cache.reconstruct_values(0, 0, 0, 3, val.data());
  for (int t = 0; t < 3; ++t) {
    std::vector<float> want(v.begin() + t * d, v.begin() + (t + 1) * d);
    rope.forward(want.data(), 10 + t);
    for (int i = 0; i < d; ++i) {
      EXPECT_NEAR(k[t * d + i], want[i], 1e-5);
      EXPECT_NEAR(val[t * d + i], v[t * d + i], 1e-5);
    }
  }
  // Re-thresholded: a near copy of entry 1 (scaled, tiny nudge) joins code 1; a fresh vector adds a code.
  const CodebookHead before = *cache.codebook(0, 0);
  CodebookHead loose = before;
  loose.theta_key = loose.theta_value = 0.99;
  cache.set_codebook(0, 0, loose);
  std::vector<float> near(v.begin() + d, v.begin() + 2 * d);
  for (float& x : near) x *= 2.5f;
  near[0] += 1e-3f;
  std::vector<float> near_rot = near;
  rope.forward(near_rot.data(), 40);
  cache.append(0, 0, 40, near_rot.data(), near.data());
  const CodebookHead& after = *cache.codebook(0, 0);
  EXPECT_EQ(after.key_index.back(), 1);
  EXPECT_EQ(after.value_index.back(), 1);
  EXPECT_EQ(after.key_codes.size(), before.key_codes.size());
  EXPECT_NEAR(after.key_norm.back(), before.key_norm[1] * 2.5f, 1e-3);
  const auto fresh = random_vectors(d, 99);
  cache.append(0, 0, 41, fresh.data(), fresh.data());
  EXPECT_EQ(cache.codebook(0, 0)->key_codes.size(), before.key_codes.size() + d);
  EXPECT_EQ(cache.codebook(0, 0)->key_index.back(), 3);
  EXPECT_EQ(cache.length(0, 0), 5);
  EXPECT_EQ(cache.positions(0, 0)[4], 41);
  EXPECT_EQ(cache.bytes_in_use(), hand_count(cache));
}

TEST(CodebookCache, KeepCompactsAndDropsUnreferencedCodes) {
  ModelConfig c = small_config();
  c.n_layers = 1;
  KVCache cache(c, KvType::F32);
  const int d = c.head_dim;
  const auto v = random_vectors(static_cast<size_t>(5) * d, 3);
  for (int t = 0; t < 5; ++t) cache.append(0, 0, t, v.data() + t * d, v.data() + t * d);
  CodebookHead cb;
  cb.key_codes = random_vectors(static_cast<size_t>(3) * d, 4);
  cb.value_codes = random_vectors(static_cast<size_t>(2) * d, 5);
  cb.key_index = {0, 1, 0, 2, 1};
  cb.value_index = {1, 1, 0, 0, 1};
  cb.key_norm = {1, 2, 3, 4, 5};
  cb.value_norm = {5, 4, 3, 2, 1};
  cache.set_codebook(0, 0, cb);
  std::vector<float> k_all(5 * d), v_all(5 * d);
  cache.reconstruct_keys(0, 0, 0, 5, k_all.data());
  cache.reconstruct_values(0, 0, 0, 5, v_all.data());

  const std::vector<int> survivors = {3, 0};  // not ascending: the order given is kept
  cache.keep(0, 0, survivors);
  const CodebookHead& kept = *cache.codebook(0, 0);
  EXPECT_EQ(kept.key_index, (std::vector<int32_t>{1, 0}));    // codes {0, 2} survive, renumbered 0, 1
  EXPECT_EQ(kept.key_codes.size(), static_cast<size_t>(2 * d));
  EXPECT_EQ(kept.value_index, (std::vector<int32_t>{0, 1}));  // both value codes still used
  EXPECT_EQ(kept.key_norm, (std::vector<float>{4, 1}));
  EXPECT_EQ(cache.positions(0, 0)[0], 3);
  EXPECT_EQ(cache.positions(0, 0)[1], 0);
  std::vector<float> k(2 * d), val(2 * d);
  cache.reconstruct_keys(0, 0, 0, 2, k.data());
  cache.reconstruct_values(0, 0, 0, 2, val.data());
  for (int i = 0; i < 2; ++i)
    for (int e = 0; e < d; ++e) {
      EXPECT_FLOAT_EQ(k[i * d + e], k_all[survivors[i] * d + e]);
      EXPECT_FLOAT_EQ(val[i * d + e], v_all[survivors[i] * d + e]);
    }
  EXPECT_EQ(cache.bytes_in_use(), (2 + 2) * d * 4u + 2 * 20);
  EXPECT_THROW(cache.keep(0, 0, std::vector<int>{2}), std::invalid_argument);
  EXPECT_THROW(cache.keep(0, 0, std::vector<int>{1, 1}), std::invalid_argument);
}

// Attention over a codebook cache equals attention over a dense cache of the reconstructed
// vectors, for one query (decode path) and for a block (prefill path), and so do the logits.
TEST(CodebookCache, AttentionAndLogitsEqualThoseOnTheReconstruction) {
  const ModelConfig c = small_config();
  const auto model = make_random_model(c, 11);
  auto coded = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  auto dense = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  const auto prompt = tokens(90, 3);
  coded->forward(std::span<const int>(prompt));
  to_codebook(coded->cache(), 0.3, 0.2);  // low thresholds: much merging
  ASSERT_LT(total_codes(coded->cache()), coded->cache().total_entries() / 2);
  dense->cache() = dense_copy(coded->cache(), c);
  dense->set_position(coded->position());

  const int G = c.n_heads / c.n_kv_heads;
  for (int n : {1, 7}) {
    const auto q = random_vectors(static_cast<size_t>(n) * c.n_heads * c.head_dim, 20 + n);
    std::vector<float> out_coded(q.size()), out_dense(q.size());
    std::vector<std::vector<float>> sums_coded, sums_dense;
    for (int layer = 0; layer < c.n_layers; ++layer) {
      block_attention(coded->cache(), {layer, q.data(), n, c.n_heads, G, out_coded.data(), &sums_coded});
      block_attention(dense->cache(), {layer, q.data(), n, c.n_heads, G, out_dense.data(), &sums_dense});
      for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(out_coded[i], out_dense[i], 1e-6) << "n " << n;
      ASSERT_EQ(sums_coded.size(), sums_dense.size());
      for (size_t h = 0; h < sums_coded.size(); ++h)
        for (size_t t = 0; t < sums_coded[h].size(); ++t) EXPECT_NEAR(sums_coded[h][t], sums_dense[h][t], 1e-6);
    }
  }
  // Logits: the prefix stays merged, but new entries must not merge (or the dense copy would hold
  // different vectors), so the decode thresholds are raised above 1 on the same codes.
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_kv_heads; ++h) {
      CodebookHead cb = *coded->cache().codebook(l, h);
      cb.theta_key = cb.theta_value = 1.01;
      coded->cache().set_codebook(l, h, std::move(cb));
    }
  int token = 17;
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> a = coded->forward(std::span<const int>(&token, 1));
    const std::vector<float>& b = dense->forward(std::span<const int>(&token, 1));
    float scale = 0;
    for (float x : b) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + scale)) << "step " << step;
    token = static_cast<int>(std::max_element(b.begin(), b.end()) - b.begin());
  }
}

// theta > 1 merges nothing: decoding from the codebook cache gives the dense decoder's logits.
TEST(CodebookCache, NoMergeCodebookDecodesLikeTheDenseCache) {
  const ModelConfig c = small_config();
  const auto model = make_random_model(c, 12);
  auto coded = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  auto dense = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  const auto prompt = tokens(60, 4);
  dense->forward(std::span<const int>(prompt));
  coded->forward(std::span<const int>(prompt));
  to_codebook(coded->cache(), 1.01, 1.01);
  EXPECT_LT(coded->cache().bytes_in_use(), dense->cache().bytes_in_use() * 2);
  int token = 5;
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> a = coded->forward(std::span<const int>(&token, 1));
    const std::vector<float>& b = dense->forward(std::span<const int>(&token, 1));
    float scale = 0;
    for (float x : b) scale = std::max(scale, std::abs(x));
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4f * (1 + scale)) << "step " << step;
    token = static_cast<int>(std::max_element(b.begin(), b.end()) - b.begin());
  }
  // Every decoded entry became its own code.
  EXPECT_EQ(total_codes(coded->cache()), coded->cache().total_entries());
  EXPECT_EQ(coded->cache().bytes_in_use(), hand_count(coded->cache()));
}

TEST(CodebookCache, SpindleKVPrefillThenDecodeOnStories260K) {
  if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto model = load_model(test::stories_checkpoint());
  const auto prompt = model->tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day she "
      "saw a big red ball in the park. She ran to the ball and kicked it very high. The ball flew over the tree "
      "and landed in the pond. Lily was sad. Her friend Tom came and helped her get the ball out of the water.",
      true);
  const auto policy = load_policy("spindlekv", {});
  auto decoder = make_cpu_decoder(*model, {.threads = 1, .kv_type = KvType::F32});
  EvictionEngine engine(*policy, model->config, {Budget::parse("40%"), 0});
  std::vector<float> logits = decoder->forward(std::span<const int>(prompt), &engine);
  KVCache& cache = decoder->cache();
  const EvictionReport& r = engine.report();
  for (int l = 0; l < cache.n_layers(); ++l)
    for (int h = 0; h < cache.n_kv_heads(); ++h) ASSERT_TRUE(cache.is_codebook(l, h));
  EXPECT_EQ(r.bytes_codebook, cache.bytes_in_use());
  EXPECT_EQ(r.bytes_kept, cache.bytes_in_use());
  EXPECT_EQ(r.bytes_codebook, hand_count(cache));
  EXPECT_GT(r.bytes_before_codebook, 0u);
  const int64_t after_prefill = cache.total_entries();
  for (int step = 0; step < 50; ++step) {
    const int token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    logits = decoder->forward(std::span<const int>(&token, 1), &engine);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  }
  EXPECT_EQ(cache.total_entries(), after_prefill + 50 * cache.n_layers() * cache.n_kv_heads());
  EXPECT_EQ(r.bytes_kept, cache.bytes_in_use());
  EXPECT_EQ(r.bytes_kept, hand_count(cache));
  // The same entries stored densely would take this much; the report's bytes are not that.
  EXPECT_NE(r.bytes_kept, cache.bytes_for_uniform_length(0) + static_cast<size_t>(cache.total_entries()) *
                                                                  (2 * cache.head_dim() * 4 + 4));
}

}  // namespace
}  // namespace kvevict
