#include "core/tokenizer/gpt2_byte_map.h"

#include "core/tokenizer/unicode_text.h"

namespace kvevict {

Gpt2ByteMap::Gpt2ByteMap() {
  cp_byte_.fill(-1);
  uint32_t next_shifted = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const uint32_t cp = printable ? b : next_shifted++;
    byte_cp_[b] = cp;
    cp_byte_[cp] = static_cast<int16_t>(b);
    append_utf8(byte_text_[b], cp);
  }
}

std::optional<uint8_t> Gpt2ByteMap::decode(uint32_t cp) const {
  if (cp >= cp_byte_.size() || cp_byte_[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(cp_byte_[cp]);
}

const Gpt2ByteMap& Gpt2ByteMap::instance() {
  static const Gpt2ByteMap map;
  return map;
}

}  // namespace kvevict
