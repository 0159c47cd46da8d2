// SHA-256 against the FIPS 180-4 / NIST example vectors.
#include "jit/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace kvevict::jit {
namespace {

std::string hex_of(const std::string& text) { return to_hex(sha256(text.data(), text.size())); }

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex_of(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + i % 26);
  for (size_t split : {size_t(0), size_t(1), size_t(55), size_t(56), size_t(63), size_t(64), size_t(65), size_t(999)}) {
    Sha256 hasher;
    hasher.update(text.substr(0, split));
    hasher.update(text.substr(split));
    EXPECT_EQ(to_hex(hasher.finish()), hex_of(text)) << "split at " << split;
  }
}

}  // namespace
}  // namespace kvevict::jit
