#pragma once
// SHA-256 (FIPS 180-4), used for config hashes and model-file provenance in the results store.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvevict::evals {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  std::string hex_digest();  // finalises; the object must not be updated afterwards

 private:
  void compress(const uint8_t* block);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(std::string_view text);
// Hash of a file's bytes; throws RuntimeError naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace kvevict::evals
