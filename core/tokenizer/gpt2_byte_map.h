#pragma once
// GPT-2's reversible byte <-> printable code point table used by byte-level BPE vocabularies:
// bytes that are printable Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves;
// the other 68 bytes map, in increasing order, to U+0100, U+0101, ... (so ' ' is U+0120 'Ġ').
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace kvevict {

class Gpt2ByteMap {
 public:
  Gpt2ByteMap();
  // UTF-8 text of the code point that stands for byte b.
  const std::string& encode(uint8_t b) const { return byte_text_[b]; }
  uint32_t code_point(uint8_t b) const { return byte_cp_[b]; }
  // The byte a code point stands for, or nullopt when it is not in the table.
  std::optional<uint8_t> decode(uint32_t cp) const;

  static const Gpt2ByteMap& instance();

 private:
  std::array<uint32_t, 256> byte_cp_{};
  std::array<std::string, 256> byte_text_;
  std::array<int16_t, 512> cp_byte_{};  // every mapped code point is < 512; -1 = unmapped
};

}  // namespace kvevict
