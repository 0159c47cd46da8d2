// The SentencePiece-style tokenizer on stories260K's tok512: round trips, the reference story's
// ids, byte fallback, and the priority-queue merge against a literal transcription of the
// repeated-scan algorithm the format describes (README §1.6).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/spm_tokenizer.h"
#include "core/util/error.h"
#include "test_models.h"

namespace kvevict {
namespace {

class Tok512 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = test::stories_missing_reason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(sha256_file(test::stories_tokenizer()), test::kTok512Sha256);
    vocab_ = read_llama2c_tokenizer(test::stories_tokenizer(), 512);
    tok_ = make_spm_tokenizer(vocab_);
  }

  // The repeated full scan: merge the best-scoring adjacent pair (leftmost on ties) until none is left.
  std::vector<int> naive_encode(const std::string& text) const {
    std::map<std::string, int> ids;
    for (int i = 0; i < 512; ++i) ids.emplace(vocab_.pieces[i], i);
    std::vector<int> out;
    if (!text.empty()) out.push_back(ids.at(" "));
    for (size_t at = 0; at < text.size();) {
      size_t len = 1;
      const unsigned char c = text[at];
      if (c >= 0xF0) len = 4; else if (c >= 0xE0) len = 3; else if (c >= 0xC0) len = 2;
      const std::string cp = text.substr(at, len);
      if (ids.count(cp)) out.push_back(ids.at(cp));
      else for (unsigned char b : cp) out.push_back(b + 3);
      at += len;
    }
    while (true) {
      float best = -1e30f;
      int best_i = -1, best_id = -1;
      for (size_t i = 0; i + 1 < out.size(); ++i) {
        auto it = ids.find(vocab_.pieces[out[i]] + vocab_.pieces[out[i + 1]]);
        if (it != ids.end() && it->second > 2 && vocab_.scores[it->second] > best) {
          best = vocab_.scores[it->second], best_i = static_cast<int>(i), best_id = it->second;
        }
      }
      if (best_i < 0) break;
      out[best_i] = best_id;
      out.erase(out.begin() + best_i + 1);
    }
    return out;
  }

  SpmVocab vocab_;
  std::unique_ptr<Tokenizer> tok_;
};

const std::vector<std::string> kTexts = {
    "Once upon a time, there was a little girl named Lily.",
    "The 3 cats ate 1024 fish in 2023!",
    "  two  leading spaces and   gaps ",
    "line one\nline two\n\ttabbed",
    "café naïve — “quotes” 日本語 🙂",
    "a",
    "",
};

TEST_F(Tok512, SpecialIdsAndKind) {
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_EQ(tok_->kind(), "spm");
  EXPECT_EQ(tok_->token_id("<0x41>"), 3 + 0x41);
}

TEST_F(Tok512, RoundTrips) {
  for (const std::string& text : kTexts) {
    EXPECT_EQ(tok_->decode(tok_->encode(text, false)), text) << text;
    const auto with_bos = tok_->encode(text, true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], 1);
    EXPECT_EQ(tok_->decode(with_bos), text) << text;
  }
}

TEST_F(Tok512, PriorityQueueMergeEqualsTheRepeatedScan) {
  for (const std::string& text : kTexts) EXPECT_EQ(tok_->encode(text, false), naive_encode(text)) << text;
}

TEST_F(Tok512, EncodesTheReferenceStoryAsTheModelWroteIt) {
  std::ifstream in(test::stories_reference());
  const auto j = nlohmann::json::parse(in);
  const auto ids = j.at("greedy_ids").get<std::vector<int>>();
  const std::vector<int> first(ids.begin(), ids.begin() + 16);
  const std::string text = tok_->decode(first);
  EXPECT_EQ(text.substr(0, 25), "Once upon a time, there w");
  EXPECT_EQ(tok_->encode(text, false), first);
}

TEST_F(Tok512, ByteFallbackForUnknownCharacters) {
  const auto ids = tok_->encode("日", false);  // E6 97 A5, not a piece of this vocabulary
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], 0xE6 + 3);
  EXPECT_EQ(ids[2], 0x97 + 3);
  EXPECT_EQ(ids[3], 0xA5 + 3);
  EXPECT_EQ(tok_->decode_piece(ids[0], ids[1]), "\xE6");
}

TEST(SpmTokenizer, GgufStyleVocabularyWithTypes) {
  // SentencePiece pieces with U+2581 for spaces, a control token that text never produces, byte pieces.
  SpmVocab v;
  v.pieces = {"<unk>", "<s>", "</s>", "<0x21>", "\xE2\x96\x81", "h", "i", "hi", "\xE2\x96\x81hi", "<|ctl|>"};
  v.scores = {0, 0, 0, 0, -1, -2, -2, -0.5f, -0.1f, 0};
  v.types = {2, 3, 3, 6, 1, 1, 1, 1, 1, 3};
  v.source = "test-vocab";
  auto tok = make_spm_tokenizer(v);
  EXPECT_EQ(tok->encode("hi", true), (std::vector<int>{1, 8}));
  EXPECT_EQ(tok->encode("hi!", false), (std::vector<int>{8, 3}));
  EXPECT_EQ(tok->decode({1, 8, 3}), "hi!");
  EXPECT_EQ(tok->encode("<|ctl|>", false, false).size(), 8u);  // spelled out as bytes/pieces, not the control id
  EXPECT_EQ(tok->encode("hi<|ctl|>hi", false, true), (std::vector<int>{8, 9, 7}));
  v.scores.pop_back();
  EXPECT_THROW(make_spm_tokenizer(v), ModelError);
}

TEST(ReadLlama2cTokenizer, TruncatedFileNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/truncated_tok.bin";
  {
    std::ofstream out(path, std::ios::binary);
    const int32_t max_len = 4;
    const float score = 0;
    const int32_t len = 9;  // longer than max_len
    out.write(reinterpret_cast<const char*>(&max_len), 4);
    out.write(reinterpret_cast<const char*>(&score), 4);
    out.write(reinterpret_cast<const char*>(&len), 4);
  }
  try {
    read_llama2c_tokenizer(path, 3);
    FAIL() << "expected a ModelError";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ChatMLWithSmolLMSystemMessage) {
  EXPECT_EQ(apply_chat_template("chatml", "Hi?"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply_chat_template("none", "Hi?"), "Hi?");
  EXPECT_THROW(apply_chat_template("jinja", "Hi?"), UsageError);
}

}  // namespace
}  // namespace kvevict
