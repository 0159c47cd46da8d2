// Byte-level BPE: the hand-written pre-tokenizers against what their regexes match, merges by rank
// on a small vocabulary, special tokens, and lossless round trips on arbitrary bytes.
#include "core/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/tokenizer/bpe_pretokenizer.h"
#include "core/tokenizer/gpt2_byte_map.h"
#include "core/tokenizer/unicode_text.h"
#include "core/util/error.h"
#include "gguf_writer.h"

namespace kvevict {
namespace {

using Chunks = std::vector<std::string>;

Chunks split(std::string_view text, BpePreTokenizer pre) {
  Chunks out;
  for (std::string_view c : pretokenize(text, pre)) out.emplace_back(c);
  return out;
}

TEST(Unicode, Classification) {
  EXPECT_EQ(classify_code_point('a'), CharClass::Letter);
  EXPECT_EQ(classify_code_point('7'), CharClass::Number);
  EXPECT_EQ(classify_code_point('\t'), CharClass::Space);
  EXPECT_EQ(classify_code_point('!'), CharClass::Other);
  EXPECT_EQ(classify_code_point(0xEF), CharClass::Letter);    // ï
  EXPECT_EQ(classify_code_point(0xE9), CharClass::Letter);    // é
  EXPECT_EQ(classify_code_point(0x65E5), CharClass::Letter);  // 日
  EXPECT_EQ(classify_code_point(0x3042), CharClass::Letter);  // あ
  EXPECT_EQ(classify_code_point(0x0416), CharClass::Letter);  // Ж
  EXPECT_EQ(classify_code_point(0xB5), CharClass::Letter);    // µ
  EXPECT_EQ(classify_code_point(0xB2), CharClass::Number);    // ²
  EXPECT_EQ(classify_code_point(0x0663), CharClass::Number);  // Arabic-Indic 3
  EXPECT_EQ(classify_code_point(0xFF15), CharClass::Number);  // fullwidth 5
  EXPECT_EQ(classify_code_point(0xA0), CharClass::Space);
  EXPECT_EQ(classify_code_point(0x3000), CharClass::Space);
  EXPECT_EQ(classify_code_point(0x1F642), CharClass::Other);  // 🙂
  EXPECT_EQ(classify_code_point(0x2014), CharClass::Other);   // —
  EXPECT_EQ(classify_code_point(0x3002), CharClass::Other);   // 。
  EXPECT_EQ(classify_code_point(0xD7), CharClass::Other);     // ×
  EXPECT_EQ(classify_code_point(0x301), CharClass::Other);    // combining acute
  EXPECT_EQ(classify_code_point(0x93F), CharClass::Other);    // Devanagari vowel sign I (Mc)
  EXPECT_EQ(classify_code_point(0x915), CharClass::Letter);   // Devanagari KA
  EXPECT_EQ(classify_code_point(0x9F4), CharClass::Number);   // Bengali currency numerator one (No)
  EXPECT_EQ(classify_code_point(0x2160), CharClass::Number);  // Roman numeral one (Nl)
  EXPECT_EQ(classify_code_point(0x1D400), CharClass::Letter); // mathematical bold A
  EXPECT_EQ(classify_code_point(0x2028), CharClass::Space);   // line separator
  EXPECT_EQ(classify_code_point(0x1C), CharClass::Other);     // not White_Space, though isspace() says so
}

TEST(Unicode, DecodeUtf8KeepsEveryByte) {
  const std::string s = "a\xC3\xA9\xF0\x9F\x99\x82\xFF\xC3";  // a é 🙂, a stray byte, a truncated sequence
  const auto u = decode_utf8(s);
  ASSERT_EQ(u.size(), 5u);
  EXPECT_EQ(u[1].cp, 0xE9u);
  EXPECT_EQ(u[2].cp, 0x1F642u);
  EXPECT_EQ(u[2].length, 4);
  EXPECT_EQ(u[3].cp, 0xFFFDu);
  EXPECT_EQ(u[4].cp, 0xFFFDu);
  EXPECT_EQ(decode_utf8("\xC0\x80").size(), 2u);      // overlong NUL: two invalid bytes
  EXPECT_EQ(decode_utf8("\xED\xA0\x80").size(), 3u);  // surrogate
}

TEST(Gpt2ByteMap, MatchesTheStraightforwardDefinition) {
  const Gpt2ByteMap& m = Gpt2ByteMap::instance();
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(m.encode(static_cast<uint8_t>(b)), test::gpt2_byte_symbol(static_cast<uint8_t>(b))) << b;
    EXPECT_EQ(m.decode(m.code_point(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(m.encode(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(m.encode('\n'), "\xC4\x8A");  // Ċ
  EXPECT_FALSE(m.decode(0x4E00).has_value());
}

TEST(PreTokenizer, Gpt2) {
  const auto G = BpePreTokenizer::Gpt2;
  EXPECT_EQ(split("Hello world", G), (Chunks{"Hello", " world"}));
  EXPECT_EQ(split("I'm fine, you're not", G), (Chunks{"I", "'m", " fine", ",", " you", "'re", " not"}));
  EXPECT_EQ(split("I'M", G), (Chunks{"I", "'", "M"}));  // contractions are case-sensitive in GPT-2
  EXPECT_EQ(split("a  b", G), (Chunks{"a", " ", " b"}));
  EXPECT_EQ(split("a\n\nb", G), (Chunks{"a", "\n", "\n", "b"}));
  EXPECT_EQ(split("a\tb", G), (Chunks{"a", "\t", "b"}));
  EXPECT_EQ(split("x   ", G), (Chunks{"x", "   "}));
  EXPECT_EQ(split("12345 678", G), (Chunks{"12345", " 678"}));
  EXPECT_EQ(split("hello!!! ok", G), (Chunks{"hello", "!!!", " ok"}));
  EXPECT_EQ(split("naïve café", G), (Chunks{"naïve", " café"}));
  EXPECT_EQ(split("日本語 🙂🙂!", G), (Chunks{"日本語", " 🙂🙂!"}));
  EXPECT_EQ(split("", G), (Chunks{}));
}

TEST(PreTokenizer, SmolLMSplitsDigitsFirst) {
  const auto S = BpePreTokenizer::SmolLM;
  EXPECT_EQ(split("12345", S), (Chunks{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("abc123def", S), (Chunks{"abc", "1", "2", "3", "def"}));
  EXPECT_EQ(split("in 2024.", S), (Chunks{"in", " ", "2", "0", "2", "4", "."}));
  EXPECT_EQ(split("Hello world", S), (Chunks{"Hello", " world"}));
}

TEST(PreTokenizer, Llama3AndQwen2) {
  const auto L = BpePreTokenizer::Llama3;
  EXPECT_EQ(split("Hello world1234567", L), (Chunks{"Hello", " world", "123", "456", "7"}));
  EXPECT_EQ(split("I'M here", L), (Chunks{"I", "'M", " here"}));
  EXPECT_EQ(split("\n\nHi", L), (Chunks{"\n\n", "Hi"}));
  EXPECT_EQ(split("x  \n y", L), (Chunks{"x", "  \n", " y"}));
  EXPECT_EQ(split("(hi)", L), (Chunks{"(hi", ")"}));
  EXPECT_EQ(split("a   b", L), (Chunks{"a", "  ", " b"}));
  EXPECT_EQ(split("ok!\n\nnext", L), (Chunks{"ok", "!\n\n", "next"}));
  EXPECT_EQ(split("12345", BpePreTokenizer::Qwen2), (Chunks{"1", "2", "3", "4", "5"}));
}

TEST(PreTokenizer, ChunksCoverRandomBytesExactly) {
  std::mt19937 rng(7);
  const char alphabet[] = "ab 1\t\n'!\xC3\xA9\xE6\x97\xA5\xF0\x9F\x99\x82\xFF";
  for (auto pre : {BpePreTokenizer::Gpt2, BpePreTokenizer::SmolLM, BpePreTokenizer::Llama3, BpePreTokenizer::Qwen2}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::string s;
      const int n = static_cast<int>(rng() % 40);
      for (int i = 0; i < n; ++i) s += alphabet[rng() % (sizeof(alphabet) - 1)];
      std::string joined;
      for (std::string_view c : pretokenize(s, pre)) {
        EXPECT_FALSE(c.empty());
        joined += c;
      }
      EXPECT_EQ(joined, s);
    }
  }
}

// The vocabulary of tests/core/gguf_writer.h: 3 specials, 256 byte symbols (id 3 + byte), then merges.
BpeVocab tiny_vocab(bool add_bos) {
  test::TinyLlama spec;
  spec.writer();
  BpeVocab v;
  v.tokens = spec.tokens;
  for (const std::string& m : spec.merges) v.merges.emplace_back(m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1));
  v.special_ids = {0, 1, 2};
  v.pre = BpePreTokenizer::SmolLM;
  v.bos_id = 1;
  v.eos_id = 0;
  v.add_bos = add_bos;
  v.extra_stop_ids = {2};
  v.source = "tiny";
  return v;
}
int byte_id(char c) { return 3 + static_cast<uint8_t>(c); }

TEST(BpeTokenizer, MergesByRank) {
  const auto tok = make_bpe_tokenizer(tiny_vocab(false));
  const int hello = 265, g_wor = 264, he = 259;
  // "hello" -> h e l l o -> he, ll -> hell -> hello; " world" -> Ġw, or -> Ġwor, l, d.
  EXPECT_EQ(tok->encode("hello world", false), (std::vector<int>{hello, g_wor, byte_id('l'), byte_id('d')}));
  EXPECT_EQ(tok->encode("hel", false), (std::vector<int>{he, byte_id('l')}));
  // "ll" (rank 1) beats "e l" (no merge) and "he ll" needs both sides merged first.
  EXPECT_EQ(tok->encode("hell", false), (std::vector<int>{261}));
  EXPECT_EQ(tok->token_id("hello"), hello);
  EXPECT_EQ(tok->kind(), "bpe");
}

TEST(BpeTokenizer, SpecialTokensAndBos) {
  const auto tok = make_bpe_tokenizer(tiny_vocab(true));
  EXPECT_EQ(tok->encode("<|im_start|>hi<|im_end|>", false, true), (std::vector<int>{1, byte_id('h'), byte_id('i'), 2}));
  const auto plain = tok->encode("<|im_start|>", false, false);
  EXPECT_EQ(plain.size(), 12u);  // one byte token per character: not parsed as special
  EXPECT_EQ(plain.front(), byte_id('<'));
  EXPECT_EQ(tok->encode("hi", true).front(), 1);
  EXPECT_EQ(tok->decode({1, byte_id('h'), 2}), "<|im_start|>h<|im_end|>");
  EXPECT_EQ(tok->stop_ids(), (std::vector<int>{0, 2}));
  const auto no_bos = make_bpe_tokenizer(tiny_vocab(false));
  EXPECT_EQ(no_bos->encode("hi", true).size(), 2u);  // add_bos_token = false wins
}

TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  const auto tok = make_bpe_tokenizer(tiny_vocab(false));
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    const int n = static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) s += static_cast<char>(rng() % 256);
    EXPECT_EQ(tok->decode(tok->encode(s, false)), s);
  }
  for (const char* s : {"hello world", "  hello\t\tworld \n", "naïve café 日本語 🙂", "12345"}) {
    EXPECT_EQ(tok->decode(tok->encode(s, false)), s);
  }
}

TEST(BpeTokenizer, RejectsBadIds) {
  BpeVocab v = tiny_vocab(false);
  v.eos_id = 100000;
  EXPECT_THROW(make_bpe_tokenizer(v), ModelError);
  EXPECT_THROW(make_bpe_tokenizer(BpeVocab{}), ModelError);
}

}  // namespace
}  // namespace kvevict
