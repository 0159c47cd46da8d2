#pragma once
// A tokenizer turns text into token ids and back. Implementations: SentencePiece-style score BPE
// (llama2.c tokenizer.bin, GGUF "llama") and GPT-2 byte-level BPE (GGUF "gpt2", tokenizer.json).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvevict {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes plain text. `add_bos` prepends the BOS id when the vocabulary has one.
  // When `parse_special` is true, special-token strings in the text (e.g. "<|im_start|>") map to
  // their ids instead of being split into ordinary pieces (used by chat templates).
  virtual std::vector<int> encode(std::string_view text, bool add_bos, bool parse_special = false) const = 0;

  // Text of `id` when it follows `prev` (-1 at the start): SentencePiece drops the leading space
  // after BOS; byte pieces become raw bytes. Concatenating pieces may give partial UTF-8 mid-way.
  virtual std::string decode_piece(int prev, int id) const = 0;
  // Round trip (checked by tests/fuzz/tokenizer_text_fuzzer on any bytes): when every byte has a
  // byte piece (SentencePiece byte fallback <0xNN>, the 256 GPT-2 byte symbols),
  // decode(encode(text, add_bos, false)) == text; SentencePiece's BOS and dummy-prefix space decode
  // to nothing, while a byte-level BPE BOS is a special token and decodes to its text.
  std::string decode(const std::vector<int>& ids) const;

  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;  // -1 if none
  virtual int eos_id() const = 0;  // -1 if none
  // Further ids that end generation (e.g. <|im_end|>), EOS included.
  virtual std::vector<int> stop_ids() const { return eos_id() >= 0 ? std::vector<int>{eos_id()} : std::vector<int>{}; }
  // Id of an exact vocabulary entry (special tokens included).
  virtual std::optional<int> token_id(std::string_view piece) const = 0;
  virtual std::string kind() const = 0;  // "spm" | "bpe"
};

}  // namespace kvevict
