#pragma once
// SHA-256 of a byte range or a file, as lowercase hex (FIPS 180-4). Used to pin model files.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvevict {

std::string sha256_hex(const uint8_t* data, size_t size);
std::string sha256_file(const std::string& path);  // throws ModelError if unreadable

}  // namespace kvevict
