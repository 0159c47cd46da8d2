// KV element conversions (core/decode/kv_type.h): the bulk paths (F16C / AVX-512 on this build)
// against the scalar references, bit for bit, over every binary16 pattern and a sweep of f32
// patterns; the scalar references against hand-worked values for rounding, subnormals, overflow,
// inf and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/decode/kv_type.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
uint32_t to_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

TEST(KvType, ParsesTheThreeNamesAndRefusesOthers) {
  EXPECT_EQ(parse_kv_type("f16", "x"), KvType::F16);
  EXPECT_EQ(parse_kv_type("bf16", "x"), KvType::BF16);
  EXPECT_EQ(parse_kv_type("f32", "x"), KvType::F32);
  EXPECT_THROW(parse_kv_type("fp16", "--kv-type"), UsageError);
  EXPECT_STREQ(kv_type_name(KvType::BF16), "bf16");
  EXPECT_EQ(kv_type_size(KvType::F32), 4u);
  EXPECT_EQ(kv_type_size(KvType::F16), 2u);
}

TEST(KvType, HalfScalarRoundsToNearestEvenKeepsSubnormalsAndSpecials) {
  EXPECT_EQ(f32_to_f16_scalar(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16_scalar(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16_scalar(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16_scalar(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16_scalar(1.0f + 0x1p-11f), 0x3c00);         // tie: to the even mantissa
  EXPECT_EQ(f32_to_f16_scalar(1.0f + 3 * 0x1p-11f), 0x3c02);     // tie: up to even
  EXPECT_EQ(f32_to_f16_scalar(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(f32_to_f16_scalar(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_scalar(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16_scalar(65520.0f), 0x7c00);  // halfway above the largest half: inf
  EXPECT_EQ(f32_to_f16_scalar(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16_scalar(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(f32_to_f16_scalar(0x1p-14f), 0x0400);   // smallest normal
  EXPECT_EQ(f32_to_f16_scalar(0x1p-24f), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16_scalar(0x1p-25f), 0x0000);   // tie with zero: even
  EXPECT_EQ(f32_to_f16_scalar(0x1.8p-25f), 0x0001);
  EXPECT_EQ(f32_to_f16_scalar(0x1.8p-24f), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(f32_to_f16_scalar(0x1.ffep-15f), 0x0400);  // 1023.5 units: rounds up into the smallest normal
  const uint16_t nan = f32_to_f16_scalar(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x3ff, 0);
  EXPECT_NE(f32_to_f16_scalar(from_bits(0x7f800001u)) & 0x3ff, 0);  // a signalling NaN stays a NaN

  EXPECT_EQ(f16_to_f32_scalar(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32_scalar(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32_scalar(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(to_bits(f16_to_f32_scalar(0x8000)), 0x80000000u);
  EXPECT_EQ(f16_to_f32_scalar(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32_scalar(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32_scalar(0x7c01)));
}

TEST(KvType, BFloatScalarRoundsToNearestEvenKeepsSubnormalsAndSpecials) {
  EXPECT_EQ(f32_to_bf16_scalar(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_scalar(from_bits(0x3f808000u)), 0x3f80);  // tie: even
  EXPECT_EQ(f32_to_bf16_scalar(from_bits(0x3f818000u)), 0x3f82);  // tie: up to even
  EXPECT_EQ(f32_to_bf16_scalar(from_bits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16_scalar(from_bits(0x00010000u)), 0x0001);  // subnormal kept, not flushed
  EXPECT_EQ(f32_to_bf16_scalar(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16_scalar(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_f32_scalar(f32_to_bf16_scalar(from_bits(0x7f800001u)))));
  EXPECT_EQ(bf16_to_f32_scalar(0x3f80), 1.0f);
}

TEST(KvType, BulkWideningEqualsTheScalarReferenceForEveryPattern) {
  std::vector<uint16_t> all(65536 + 5);  // an odd length exercises the vector tails
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> out(all.size());
  for (KvType t : {KvType::F16, KvType::BF16}) {
    kv_to_f32(t, all.data(), out.data(), all.size());
    int bad = 0;  // equal bit patterns, except that a NaN only has to stay a NaN
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = t == KvType::F16 ? f16_to_f32_scalar(all[i]) : bf16_to_f32_scalar(all[i]);
      const bool same = std::isnan(want) ? std::isnan(out[i]) : to_bits(out[i]) == to_bits(want);
      if (!same && ++bad < 10) ADD_FAILURE() << kv_type_name(t) << " pattern " << std::hex << all[i];
    }
    EXPECT_EQ(bad, 0) << kv_type_name(t);
  }
}

TEST(KvType, BulkNarrowingEqualsTheScalarReferenceOverAnF32Sweep) {
  std::vector<float> in;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) in.push_back(from_bits(static_cast<uint32_t>(u)));
  // Every rounding boundary of the half range, both signs: ties, just above and below them.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const uint32_t mid = to_bits(f16_to_f32_scalar(static_cast<uint16_t>(h))) + (1u << 12);
    for (uint32_t u : {mid - 1, mid, mid + 1}) {
      in.push_back(from_bits(u));
      in.push_back(-from_bits(u));
    }
  }
  in.push_back(0x1p-25f);
  in.push_back(0x1p-26f);
  std::vector<uint16_t> bits(in.size());
  for (KvType t : {KvType::F16, KvType::BF16}) {
    kv_from_f32(t, in.data(), bits.data(), in.size());
    int bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t want = t == KvType::F16 ? f32_to_f16_scalar(in[i]) : f32_to_bf16_scalar(in[i]);
      if (std::isnan(in[i])) {
        const bool nan = t == KvType::F16 ? (bits[i] & 0x7c00) == 0x7c00 && (bits[i] & 0x3ff) != 0
                                          : (bits[i] & 0x7f80) == 0x7f80 && (bits[i] & 0x7f) != 0;
        if (!nan && ++bad < 10) ADD_FAILURE() << kv_type_name(t) << " NaN " << std::hex << to_bits(in[i]);
      } else if (bits[i] != want && ++bad < 10) {
        ADD_FAILURE() << kv_type_name(t) << " input " << std::hex << to_bits(in[i]) << ": bulk " << bits[i]
                      << ", scalar " << want;
      }
    }
    EXPECT_EQ(bad, 0) << kv_type_name(t);
  }
}

TEST(KvType, EveryFiniteHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0) continue;  // NaN
    ASSERT_EQ(f32_to_f16_scalar(f16_to_f32_scalar(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace kvevict
