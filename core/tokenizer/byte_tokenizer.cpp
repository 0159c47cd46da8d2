#include "core/tokenizer/byte_tokenizer.h"

#include <stdexcept>
#include <string>

namespace kvevict {

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(int vocab_size) : vocab_size_(vocab_size) {
    if (vocab_size < 258) throw std::invalid_argument("byte tokenizer needs a vocabulary of at least 258 ids");
  }
  std::vector<int> encode(std::string_view text, bool add_bos, bool) const override {
    std::vector<int> ids;
    if (add_bos) ids.push_back(kBos);
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  std::string decode_piece(int, int id) const override {
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return kBos; }
  int eos_id() const override { return kEos; }
  std::optional<int> token_id(std::string_view piece) const override {
    if (piece.size() == 1) return static_cast<unsigned char>(piece[0]);
    return std::nullopt;
  }
  std::string kind() const override { return "byte"; }

 private:
  static constexpr int kBos = 256, kEos = 257;
  int vocab_size_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(int vocab_size) { return std::make_unique<ByteTokenizer>(vocab_size); }

}  // namespace kvevict
