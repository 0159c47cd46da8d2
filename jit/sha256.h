#pragma once
// SHA-256 (FIPS 180-4), written from the standard so the kernel cache needs no crypto library.
// Used for cache keys and payload checksums: collision resistance matters because a key collision
// would silently load another policy's kernel.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvevict::jit {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  Sha256Digest finish();  // the object must not be updated afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const void* data, size_t size);
std::string to_hex(const uint8_t* bytes, size_t size);
inline std::string to_hex(const Sha256Digest& digest) { return to_hex(digest.data(), digest.size()); }

}  // namespace kvevict::jit
