// SentencePiece-style score BPE (see spm_tokenizer.h). Merging uses a priority queue over adjacent
// symbol pairs (best score first, leftmost on ties), which yields the same result as llama2.c's
// repeated full scan in O(n log n).
#include "core/tokenizer/spm_tokenizer.h"

#include <array>
#include <cstdio>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "core/util/byte_reader.h"
#include "core/util/error.h"

namespace kvevict {

namespace {

constexpr int kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeUserDefined = 4, kTypeByte = 6;

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

// Length of the UTF-8 sequence starting with byte c (1 for invalid lead bytes, so bad input still advances).
size_t utf8_length(unsigned char c) {
  if (c >= 0xF0 && c < 0xF8) return 4;
  if (c >= 0xE0) return c < 0xF0 ? 3 : 1;
  if (c >= 0xC0) return 2;
  return 1;
}

std::string replace_spm_spaces(const std::string& piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
      out += ' ';
      i += 2;
    } else {
      out += piece[i];
    }
  }
  return out;
}

// "<0xNN>" -> NN, else -1.
int byte_piece_value(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(SpmVocab vocab) : v_(std::move(vocab)) {
    const int n = static_cast<int>(v_.pieces.size());
    if (n == 0) throw ModelError(v_.source, "empty vocabulary");
    if (v_.scores.size() != v_.pieces.size()) throw ModelError(v_.source, "vocabulary has a different number of scores and pieces");
    if (!v_.types.empty() && v_.types.size() != v_.pieces.size()) throw ModelError(v_.source, "vocabulary has a different number of types and pieces");
    for (int id : {v_.bos_id, v_.eos_id, v_.unk_id}) {
      if (id >= n) throw ModelError(v_.source, "special token id " + std::to_string(id) + " is outside the vocabulary");
    }
    // GGUF keeps SentencePiece's U+2581 for spaces; llama2.c's export already turned it into ' '.
    for (std::string& piece : v_.pieces) piece = replace_spm_spaces(piece);
    types_ = v_.types;
    if (types_.empty()) {
      // llama2.c vocabularies carry no types: unk/BOS/EOS are control, <0xNN> pieces are bytes.
      types_.assign(n, kTypeNormal);
      for (int i = 0; i < n; ++i) {
        if (byte_piece_value(v_.pieces[i]) >= 0) types_[i] = kTypeByte;
      }
      for (int id : {v_.bos_id, v_.eos_id, v_.unk_id}) {
        if (id >= 0) types_[id] = kTypeControl;
      }
    }
    byte_ids_.fill(-1);
    for (int i = 0; i < n; ++i) {
      const int t = types_[i];
      if (t == kTypeByte) {
        const int b = byte_piece_value(v_.pieces[i]);
        if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = i;
      } else if (t == kTypeControl || t == kTypeUserDefined) {
        if (!v_.pieces[i].empty()) special_.push_back(i);
        all_.emplace(v_.pieces[i], i);
      } else if (t != kTypeUnknown) {
        text_.emplace(v_.pieces[i], i);
      }
      all_.emplace(v_.pieces[i], i);
    }
  }

  std::vector<int> encode(std::string_view text, bool add_bos, bool parse_special) const override {
    std::vector<int> ids;
    if (add_bos && v_.bos_id >= 0) ids.push_back(v_.bos_id);
    bool first_segment = true;
    size_t start = 0;
    while (start <= text.size()) {
      // Next special-token match, if any (longest at the earliest position).
      size_t match_at = std::string_view::npos, match_len = 0;
      int match_id = -1;
      if (parse_special) {
        for (int id : special_) {
          const std::string& piece = v_.pieces[id];
          const size_t at = text.find(piece, start);
          if (at != std::string_view::npos && (at < match_at || (at == match_at && piece.size() > match_len))) {
            match_at = at, match_len = piece.size(), match_id = id;
          }
        }
      }
      const size_t end = match_id >= 0 ? match_at : text.size();
      if (end > start) encode_text(text.substr(start, end - start), first_segment && v_.add_dummy_prefix, ids);
      first_segment = false;
      if (match_id < 0) break;
      ids.push_back(match_id);
      start = match_at + match_len;
    }
    return ids;
  }

  std::string decode_piece(int prev, int id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const int type = types_[id];
    if (type == kTypeControl || type == kTypeUnknown) return "";
    if (type == kTypeByte) {
      const int b = byte_piece_value(v_.pieces[id]);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : "";
    }
    const std::string& piece = v_.pieces[id];
    // The dummy-prefix space of the first piece is not part of the text.
    if ((prev < 0 || prev == v_.bos_id) && !piece.empty() && piece[0] == ' ') return piece.substr(1);
    return piece;
  }

  int vocab_size() const override { return static_cast<int>(v_.pieces.size()); }
  int bos_id() const override { return v_.bos_id; }
  int eos_id() const override { return v_.eos_id; }
  std::optional<int> token_id(std::string_view piece) const override {
    auto it = all_.find(piece);
    if (it == all_.end()) return std::nullopt;
    return it->second;
  }
  std::string kind() const override { return "spm"; }

 private:
  struct Symbol {
    size_t start, len;
    int prev, next;
  };
  struct Candidate {
    float score;
    int left;
    size_t len;  // merged length, to detect stale entries
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
  };

  void encode_text(std::string_view raw, bool dummy_prefix, std::vector<int>& ids) const {
    std::string text;
    text.reserve(raw.size() + 1);
    if (dummy_prefix) text.push_back(' ');
    text.append(raw);
    std::vector<Symbol> symbols;
    for (size_t at = 0; at < text.size();) {
      const size_t len = std::min(utf8_length(static_cast<unsigned char>(text[at])), text.size() - at);
      symbols.push_back({at, len, static_cast<int>(symbols.size()) - 1, static_cast<int>(symbols.size()) + 1});
      at += len;
    }
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::priority_queue<Candidate> queue;
    auto consider = [&](int left) {
      if (left < 0 || symbols[left].next < 0) return;
      const Symbol& a = symbols[left];
      const Symbol& b = symbols[a.next];
      auto it = text_.find(std::string_view(text).substr(a.start, a.len + b.len));
      if (it != text_.end()) queue.push({v_.scores[it->second], left, a.len + b.len});
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& a = symbols[c.left];
      if (a.len == 0 || a.next < 0 || a.len + symbols[a.next].len != c.len) continue;  // stale
      Symbol& b = symbols[a.next];
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (a.next >= 0) symbols[a.next].prev = c.left;
      consider(a.prev);
      consider(c.left);
    }
    for (int i = 0; i >= 0; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      auto it = text_.find(std::string_view(text).substr(s.start, s.len));
      if (it != text_.end()) {
        ids.push_back(it->second);
        continue;
      }
      for (size_t k = 0; k < s.len; ++k) {  // byte fallback
        const int byte_id = byte_ids_[static_cast<unsigned char>(text[s.start + k])];
        ids.push_back(byte_id >= 0 ? byte_id : v_.unk_id);
      }
    }
  }

  SpmVocab v_;
  std::vector<int> types_;
  PieceMap text_;  // pieces plain text may produce (not control, unknown or byte pieces)
  PieceMap all_;
  std::vector<int> special_;  // control and user-defined ids matched verbatim when parse_special
  std::array<int, 256> byte_ids_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(SpmVocab vocab) { return std::make_unique<SpmTokenizer>(std::move(vocab)); }

SpmVocab read_llama2c_tokenizer(const std::string& path, int vocab_size) {
  MappedFile file(path);
  ByteReader r(file.data(), file.size(), path);
  SpmVocab vocab;
  vocab.source = path;
  const int32_t max_len = r.read<int32_t>();
  if (max_len <= 0 || max_len > (1 << 16)) r.fail("invalid max token length " + std::to_string(max_len));
  // Each token takes at least 8 bytes (score, length): a vocabulary the file cannot hold is refused
  // before anything is reserved for it.
  if (vocab_size <= 0 || static_cast<uint64_t>(vocab_size) > r.remaining() / 8) {
    r.fail("cannot hold " + std::to_string(vocab_size) + " tokens (" + std::to_string(r.remaining()) +
           " bytes after the header, at least 8 per token)");
  }
  vocab.pieces.reserve(vocab_size);
  vocab.scores.reserve(vocab_size);
  for (int i = 0; i < vocab_size; ++i) {
    vocab.scores.push_back(r.read<float>());
    const int32_t len = r.read<int32_t>();
    if (len < 0 || len > max_len) {
      r.fail("token " + std::to_string(i) + " has length " + std::to_string(len) + " (max " + std::to_string(max_len) + ")");
    }
    vocab.pieces.push_back(r.read_string(static_cast<size_t>(len), "token text"));
  }
  return vocab;
}

}  // namespace kvevict
