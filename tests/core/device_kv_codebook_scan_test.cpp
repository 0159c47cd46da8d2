// The codebook append's split (core/decode/device_kv_codebook_scan.h): the best of every chunk's
// match and of the codes the append added, however the chunks and the threads (lanes) divide the
// scan, is the in-order scan's code with its cosine, ties (equal cosines: the lower index), NaN
// codes (never a match) and empty books included. The kernels' and the twin's steps 2 and 3 are
// these functions; the twin's whole append against the host is DeviceKvMirrorCodebook.*.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/decode/device_kv_codebook_scan.h"

namespace kvevict {
namespace {

TEST(DeviceKvCodebookScan, AnySplitOfTheScanFindsTheInOrderScansCode) {
  constexpr int d = 8, heads = 2, rows = 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  int matched = 0, none = 0, ties = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const bool shared = trial % 2 == 1;
    const int books = shared ? 1 : heads;
    const int capacity = static_cast<int>(rng() % 48);
    DeviceCodebookAppendArgs a;
    a.head_dim = d;
    a.n_heads = heads;
    a.rows = rows;
    a.shared = shared;
    a.code_capacity = capacity;
    std::vector<float> key_codes(static_cast<size_t>(books) * capacity * d), value_codes(key_codes.size());
    std::vector<int32_t> key_count(books), value_count(books);
    const auto fill = [&](std::vector<float>& codes) {
      // A few directions, repeated (equal cosines), some noisy copies, one NaN code now and then.
      std::vector<float> base(4 * d);
      for (float& x : base) x = normal(rng);
      for (size_t c = 0; c < codes.size() / d; ++c) {
        const int kind = static_cast<int>(rng() % 10);
        for (int i = 0; i < d; ++i) {
          float x = base[(c % 4) * d + i];
          if (kind >= 6) x += 0.05f * normal(rng);
          if (kind == 9 && i == 0 && rng() % 4 == 0) x = std::numeric_limits<float>::quiet_NaN();
          codes[c * d + i] = x;
        }
        float n = 0;
        for (int i = 0; i < d; ++i) n += codes[c * d + i] * codes[c * d + i];
        if (std::isfinite(n) && n > 0)
          for (int i = 0; i < d; ++i) codes[c * d + i] /= std::sqrt(n);
      }
    };
    fill(key_codes);
    fill(value_codes);
    for (int b = 0; b < books; ++b) {
      key_count[b] = capacity ? static_cast<int32_t>(rng() % (capacity + 1)) : 0;
      value_count[b] = capacity ? static_cast<int32_t>(rng() % (capacity + 1)) : 0;
    }
    a.key_codes = key_codes.data();
    a.value_codes = value_codes.data();
    a.key_count = key_count.data();
    a.value_count = value_count.data();
    for (int h = 0; h < heads; ++h) {
      a.theta_key[h] = 0.5 + 0.1 * h;
      a.theta_value[h] = trial % 5 == 0 ? -2.0 : 0.9;  // -2: every code but a NaN one matches
    }
    const int queries = device_codebook_queries(a);
    ASSERT_EQ(queries, heads * rows * 2);
    // Units: a stored code itself (an exact tie with it and its repeats) or a fresh direction.
    std::vector<float> units(static_cast<size_t>(queries) * d);
    for (int q = 0; q < queries; ++q) {
      const int h = device_codebook_query_head(a, q);
      const bool key = device_codebook_query_key(q);
      const int32_t count = *device_codebook_count(a, key, device_codebook_book_of(a, h));
      const float* codes = device_codebook_codes(a, key, device_codebook_book_of(a, h));
      if (count > 0 && rng() % 2 == 0) {
        std::memcpy(&units[static_cast<size_t>(q) * d], codes + static_cast<size_t>(rng() % count) * d, d * sizeof(float));
      } else {
        for (int i = 0; i < d; ++i) units[static_cast<size_t>(q) * d + i] = normal(rng) / std::sqrt(float(d));
      }
    }
    DeviceCodebookScan s;
    s.units = units.data();
    s.chunk_codes = 1 + static_cast<int32_t>(rng() % 7);
    s.chunks = device_codebook_chunks(capacity, s.chunk_codes);
    std::vector<CodebookMatch> chunk_best(static_cast<size_t>(queries) * s.chunks);
    s.chunk_best = chunk_best.data();
    const int lanes = 1 + static_cast<int>(rng() % 5);
    for (int q = 0; q < queries; ++q) {
      const int h = device_codebook_query_head(a, q);
      const bool key = device_codebook_query_key(q);
      const int book = device_codebook_book_of(a, h);
      const int32_t count = *device_codebook_count(a, key, book);
      const int32_t launch = count ? static_cast<int32_t>(rng() % (count + 1)) : 0;  // codes below: the chunks'
      const double theta = device_codebook_theta(a, h, key);
      // Step 2: each chunk over the codes the book held when the append began, its lanes folded.
      for (int k = 0; k < s.chunks; ++k) {
        CodebookMatch m;
        for (int lane = 0; lane < lanes; ++lane)
          m = codebook_better(m, device_codebook_chunk_match(a, s, q, k, launch, lane, lanes), theta);
        chunk_best[static_cast<size_t>(q) * s.chunks + k] = m;
      }
      // Step 3: the chunks' best and the codes added since, lane by lane, then across the lanes.
      CodebookMatch got;
      for (int lane = 0; lane < lanes; ++lane)
        got = codebook_better(got,
                              codebook_better(device_codebook_chunks_best(a, s, q, lane, lanes),
                                              device_codebook_new_codes_match(a, s, q, launch, count, lane, lanes),
                                              theta),
                              theta);
      const float* codes = device_codebook_codes(a, key, book);
      const CodebookMatch want = codebook_scan(codes, d, &units[static_cast<size_t>(q) * d], theta, 0, count, 1);
      ASSERT_EQ(got.code, want.code) << "trial " << trial << " query " << q << " chunk " << s.chunk_codes << " lanes "
                                     << lanes << " launch " << launch << " of " << count;
      if (want.code >= 0) {
        EXPECT_EQ(std::memcmp(&got.dot, &want.dot, sizeof(float)), 0);
        ++matched;
        // A later code of the same cosine (a repeat) exists: the tie went to the lower index.
        for (int32_t c = want.code + 1; c < count; ++c)
          if (codebook_dot(codes + static_cast<size_t>(c) * d, &units[static_cast<size_t>(q) * d], d) == want.dot) {
            ++ties;
            break;
          }
      } else {
        ++none;
      }
    }
  }
  // The trials met every case they are meant to.
  EXPECT_GT(matched, 1000);
  EXPECT_GT(none, 200);
  EXPECT_GT(ties, 200);
}

TEST(DeviceKvCodebookScan, QueriesNumberHeadsRowsThenKeyAndValue) {
  DeviceCodebookAppendArgs a;
  a.n_heads = 3;
  a.rows = 4;
  int q = 0;
  for (int h = 0; h < a.n_heads; ++h)
    for (int r = 0; r < a.rows; ++r)
      for (const bool key : {true, false}) {
        ASSERT_EQ(device_codebook_query(a, h, r, key), q);
        EXPECT_EQ(device_codebook_query_head(a, q), h);
        EXPECT_EQ(device_codebook_query_key(q), key);
        ++q;
      }
  EXPECT_EQ(device_codebook_queries(a), q);
  EXPECT_EQ(device_codebook_chunks(0, 1024), 0);
  EXPECT_EQ(device_codebook_chunks(1024, 1024), 1);
  EXPECT_EQ(device_codebook_chunks(1025, 1024), 2);
  DeviceCodebookScan s;
  s.chunk_codes = 4;
  int32_t first = 0, end = 0;
  device_codebook_chunk_range(s, 2, 10, &first, &end);
  EXPECT_EQ(first, 8);
  EXPECT_EQ(end, 10);
  device_codebook_chunk_range(s, 3, 10, &first, &end);
  EXPECT_EQ(first, end);  // past the count: empty
}

}  // namespace
}  // namespace kvevict
