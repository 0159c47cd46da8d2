#pragma once
// SHA-256 of a string, as lowercase hex (wraps core/util/sha256.h).
#include <cstdint>
#include <string>

#include "core/util/sha256.h"

namespace kvevict::evals {

inline std::string sha256_text(const std::string& text) {
  return kvevict::sha256_hex(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace kvevict::evals
