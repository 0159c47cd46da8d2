#include "core/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/tokenizer/bpe_pretokenizer.h"
#include "core/tokenizer/gpt2_byte_map.h"
#include "core/tokenizer/unicode_text.h"
#include "core/util/error.h"

namespace kvevict {
namespace {

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeVocab vocab) : v_(std::move(vocab)) {
    const int n = static_cast<int>(v_.tokens.size());
    if (n == 0) throw ModelError(v_.source, "empty BPE vocabulary");
    auto check_id = [&](int id, const char* what) {
      if (id < -1 || id >= n) throw ModelError(v_.source, std::string(what) + " id " + std::to_string(id) + " is outside the vocabulary");
    };
    check_id(v_.bos_id, "BOS");
    check_id(v_.eos_id, "EOS");
    for (int id : v_.extra_stop_ids) check_id(id, "stop token");
    ids_.reserve(v_.tokens.size());
    for (int i = 0; i < n; ++i) ids_.emplace(v_.tokens[i], i);  // first occurrence wins on duplicates
    merge_rank_.reserve(v_.merges.size());
    for (size_t r = 0; r < v_.merges.size(); ++r) {
      merge_rank_.emplace(v_.merges[r].first + ' ' + v_.merges[r].second, static_cast<int>(r));
    }
    is_special_.assign(v_.tokens.size(), false);
    for (int id : v_.special_ids) {
      check_id(id, "special token");
      if (id < 0) continue;
      is_special_[id] = true;
      if (!v_.tokens[id].empty()) specials_.push_back(id);
    }
    // Longest first, so "<|im_start|>" wins over a shorter special that is its prefix.
    std::sort(specials_.begin(), specials_.end(),
              [&](int a, int b) { return v_.tokens[a].size() > v_.tokens[b].size(); });
  }

  std::vector<int> encode(std::string_view text, bool add_bos, bool parse_special) const override {
    std::vector<int> out;
    if (add_bos && v_.add_bos && v_.bos_id >= 0) out.push_back(v_.bos_id);
    size_t start = 0;
    if (parse_special && !specials_.empty()) {
      for (size_t i = 0; i < text.size();) {
        int hit = match_special(text, i);
        if (hit < 0) {
          ++i;
          continue;
        }
        encode_plain(text.substr(start, i - start), out);
        out.push_back(hit);
        i += v_.tokens[hit].size();
        start = i;
      }
    }
    encode_plain(text.substr(start), out);
    return out;
  }

  std::string decode_piece(int /*prev*/, int id) const override {
    if (id < 0 || id >= vocab_size()) throw RuntimeError(v_.source + ": token id " + std::to_string(id) + " is outside the vocabulary");
    const std::string& t = v_.tokens[id];
    if (is_special_[id]) return t;
    std::string out;
    const Gpt2ByteMap& map = Gpt2ByteMap::instance();
    for (const Utf8Unit& u : decode_utf8(t)) {
      if (auto b = map.decode(u.cp)) out += static_cast<char>(*b);
      else out.append(t, u.offset, u.length);  // not a byte symbol: keep the character as written
    }
    return out;
  }

  int vocab_size() const override { return static_cast<int>(v_.tokens.size()); }
  int bos_id() const override { return v_.bos_id; }
  int eos_id() const override { return v_.eos_id; }
  std::vector<int> stop_ids() const override {
    std::vector<int> ids;
    if (v_.eos_id >= 0) ids.push_back(v_.eos_id);
    for (int id : v_.extra_stop_ids) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    return ids;
  }
  std::optional<int> token_id(std::string_view piece) const override {
    auto it = ids_.find(std::string(piece));
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::string kind() const override { return "bpe"; }

 private:
  int match_special(std::string_view text, size_t i) const {
    for (int id : specials_) {
      const std::string& s = v_.tokens[id];
      if (text.compare(i, s.size(), s) == 0) return id;
    }
    return -1;
  }

  void encode_plain(std::string_view text, std::vector<int>& out) const {
    if (text.empty()) return;
    for (std::string_view chunk : pretokenize(text, v_.pre)) encode_chunk(chunk, out);
  }

  // Byte-level BPE on one pre-token: start from one symbol per byte, then repeatedly merge the
  // adjacent pair with the lowest merge rank (leftmost on ties) until no ranked pair is left.
  void encode_chunk(std::string_view chunk, std::vector<int>& out) const {
    if (chunk.empty()) return;
    const Gpt2ByteMap& map = Gpt2ByteMap::instance();
    std::string w;  // the chunk in GPT-2 symbols; every symbol is a contiguous range of w
    struct Symbol {
      uint32_t start, len;
      int prev, next;
    };
    std::vector<Symbol> sym;
    sym.reserve(chunk.size());
    for (unsigned char b : chunk) {
      const std::string& t = map.encode(b);
      const int i = static_cast<int>(sym.size());
      sym.push_back({static_cast<uint32_t>(w.size()), static_cast<uint32_t>(t.size()), i - 1, i + 1});
      w += t;
    }
    sym.back().next = -1;

    struct Candidate {
      int rank, left;
      uint32_t left_len, right_len;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
    std::string key;
    auto consider = [&](int left) {
      if (left < 0 || sym[left].next < 0) return;
      const Symbol& a = sym[left];
      const Symbol& b = sym[a.next];
      key.assign(w, a.start, a.len);
      key += ' ';
      key.append(w, b.start, b.len);
      auto it = merge_rank_.find(key);
      if (it != merge_rank_.end()) queue.push({it->second, left, a.len, b.len});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);

    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      Symbol& a = sym[c.left];
      // Stale entries: the left symbol was absorbed (len 0) or either side has grown since.
      if (a.len != c.left_len || a.next < 0 || sym[a.next].len != c.right_len) continue;
      Symbol& b = sym[a.next];
      a.len += b.len;
      b.len = 0;
      a.next = b.next;
      if (b.next >= 0) sym[b.next].prev = c.left;
      consider(a.prev);
      consider(c.left);
    }

    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string piece = w.substr(sym[i].start, sym[i].len);
      auto it = ids_.find(piece);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      // Not in the vocabulary (a vocabulary without some merge result): fall back to single bytes.
      // Bytes the vocabulary has no symbol for are dropped, as Hugging Face tokenizers and
      // llama.cpp do (SmolLM2 has none for 0xC0, 0xC1, 0xF5-0xFF and a few control bytes).
      for (const Utf8Unit& u : decode_utf8(piece)) {
        auto byte_id = ids_.find(piece.substr(u.offset, u.length));
        if (byte_id != ids_.end()) out.push_back(byte_id->second);
      }
    }
  }

  BpeVocab v_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_map<std::string, int> merge_rank_;
  std::vector<bool> is_special_;
  std::vector<int> specials_;  // ids, longest text first
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeVocab vocab) { return std::make_unique<BpeTokenizer>(std::move(vocab)); }

}  // namespace kvevict
